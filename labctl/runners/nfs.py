"""NFS between two nodes: the kernel's NFS server (nfsd) on the server node, exporting a
tmpfs to the client only, with an RDMA listener (`rdma 20049` in /proc/fs/nfsd/portlist,
svcrdma) beside its TCP one; the client mounts it with proto=rdma (NFS/RDMA, RFC 8267) or
proto=tcp, NFS 4.2 both ways.

Nodes run no systemd: rpcbind, rpc.mountd and the nfsd threads are started by hand here.
labctl's exports live under EXPORT_ROOT and its mounts under MOUNT_ROOT; the cleanup steps
stop nfsd and remove those (a run killed midway leaves them) and nothing else.
"""

from __future__ import annotations

from labctl.runners.example_spec import ArgvBuilder, RunContext
from labctl.runners.storageio import IO_FUNCTIONS, PATTERN_FILE, READBACK_FILE

EXPORT_ROOT = "/srv/labctl-nfs"
MOUNT_ROOT = "/mnt/labctl-nfs"
PORTS = {"rdma": 20049, "tcp": 2049}  # NFS/RDMA's IANA port, and NFS's
FSID = 7701  # a tmpfs has no device number an export could be named by
THREADS = 2
# A fresh nfsd refuses OPENs for its grace period (90 s by default) while clients reclaim
# state; a server labctl just started has none to reclaim: the shortest grace (10 s), then
# ended at once (v4_end_grace). The lease is the shortest too: a dead client's state goes.
GRACE_SECONDS = 10
PIPEFS = "/run/rpc_pipefs"  # nfs.conf's pipefs-directory in the nodes
# A soft mount fails a call after retrans tries of timeo tenths of a second each, instead
# of retrying for ever (hard, the default): a client whose server died ends within a bound.
MOUNT_OPTIONS = "vers=4.2,proto={proto},port={port},soft,timeo=50,retrans=2"


def export_dir(transport: str) -> str:
    return f"{EXPORT_ROOT}-{transport}"


def mount_dir(transport: str) -> str:
    return f"{MOUNT_ROOT}-{transport}"


# No $1: unexport all (the node's exports are all labctl's), stop nfsd's threads (which
# closes its listeners, RDMA's too), unmount labctl's tmpfs exports.
_SERVER_CLEANUP = r"""
if command -v exportfs >/dev/null && [ -n "$(exportfs 2>/dev/null)" ]; then
  exportfs -ua && echo "labctl: removed exports"
fi
if [ -r /proc/fs/nfsd/threads ] && [ "$(cat /proc/fs/nfsd/threads)" != 0 ]; then
  rpc.nfsd 0 && echo "labctl: stopped nfsd"
fi
for d in $(awk '$2 ~ "^ROOT-" {print $2}' /proc/mounts); do
  umount "$d" && rmdir "$d" && echo "labctl: removed export $d"
done
true
""".replace("ROOT", EXPORT_ROOT)

# $1 export dir, $2 client address, $3 transport, $4 port, $5 MiB
_SERVER_SETUP = _SERVER_CLEANUP + r"""
fail() { echo "labctl: failed: $*"; dmesg 2>/dev/null | tail -n 12 | sed 's/^/dmesg: /'; exit 1; }
modprobe nfsd || fail "modprobe nfsd"
if [ "$3" = rdma ]; then modprobe rpcrdma || fail "modprobe rpcrdma"; fi
grep -q " /proc/fs/nfsd nfsd " /proc/mounts || mount -t nfsd nfsd /proc/fs/nfsd ||
  fail "mount nfsd"
pgrep -x rpcbind >/dev/null || rpcbind -w || fail "rpcbind"
mkdir -p "$1" && mount -t tmpfs -o "size=$(($5 + 16))m" labctl-nfs "$1" || fail "tmpfs $1"
exportfs -o "rw,no_root_squash,insecure,no_subtree_check,fsid=FSID" "$2:$1" ||
  fail "exportfs $2:$1"
pgrep -x rpc.mountd >/dev/null || rpc.mountd || fail "rpc.mountd"
# nfsdcld: nfsd's client tracker (without it nfsd waits ~10 s for it at start, then keeps
# the whole grace period); with it and no client to reclaim, nfsd skips the grace period.
grep -q " PIPEFS rpc_pipefs " /proc/mounts || { mkdir -p PIPEFS &&
  mount -t rpc_pipefs sunrpc PIPEFS; } || fail "mount rpc_pipefs on PIPEFS"
pgrep -x nfsdcld >/dev/null || nfsdcld || fail "nfsdcld"
echo GRACE > /proc/fs/nfsd/nfsv4gracetime; echo GRACE > /proc/fs/nfsd/nfsv4leasetime
rpc.nfsd THREADS 2>&1 || fail "rpc.nfsd"
if [ "$3" = rdma ]; then
  grep -qx "rdma $4" /proc/fs/nfsd/portlist || echo "rdma $4" > /proc/fs/nfsd/portlist ||
    fail "rdma listener $4 (echo rdma $4 > /proc/fs/nfsd/portlist)"
fi
# A client of an earlier run that was not unmounted is one to reclaim: wait for the grace
# period's end (reading v4_end_grace says Y), or the first OPEN waits it out unseen.
i=0
while [ "$(cat /proc/fs/nfsd/v4_end_grace)" != Y ] && [ $i -lt WAIT ]; do
  sleep 0.5; i=$((i + 1))
done
[ $i -gt 0 ] && echo "labctl: waited $((i / 2)) s for nfsd's grace period to end"
sed 's/^/portlist: /' /proc/fs/nfsd/portlist
echo "labctl: export $2:$1 (tmpfs, $5 MiB + 16), nfsd on $3 port $4"
""".replace("FSID", str(FSID)).replace("GRACE", str(GRACE_SECONDS)).replace(
    "THREADS", str(THREADS)).replace("PIPEFS", PIPEFS).replace("WAIT", str(4 * GRACE_SECONDS))

# No $1: lazily unmount labctl's mounts (-f: a server that died must not hang the umount).
_CLIENT_CLEANUP = r"""
for m in $(awk '$2 ~ "^ROOT-" {print $2}' /proc/mounts); do
  umount -f -l "$m" && echo "labctl: unmounted $m"
done
rm -f PATTERN READBACK
true
""".replace("ROOT", MOUNT_ROOT).replace("PATTERN", PATTERN_FILE).replace(
    "READBACK", READBACK_FILE)

# $1 server address, $2 export dir, $3 mount dir, $4 transport, $5 port, $6 MiB, $7 options.
# The mount is tried 3 times (siw's connection setup under a loaded TCG host).
_CLIENT_RUN = IO_FUNCTIONS + r"""
fail() { note "failed: $*"; kernel_log; umount -f -l "$3" 2>/dev/null; exit 1; }
if [ "$4" = rdma ]; then modprobe rpcrdma || fail "modprobe rpcrdma"; fi
mkdir -p "$3" || fail "mkdir $3"
try=1
until timeout 60 mount -t nfs -o "$7" "$1:$2" "$3" 2>&1; do
  if [ $try -ge 3 ]; then fail "mount"; fi
  try=$((try + 1)); sleep 2
done
note "mount tries $try"
grep -F " $3 " /proc/mounts | sed 's/^/mount: /'
note "mounted $3"
if io "$3/labctl-data" "$6"; then
  rm -f "$3/labctl-data"
  umount "$3" 2>&1 || fail "umount"
else
  # a server gone away: every call on the mount waits out the soft timeout; leave it now
  kernel_log; umount -f -l "$3" 2>/dev/null; exit 1
fi
"""


def _sh(script: str, *args: str) -> list[str]:
    return ["sh", "-c", script, "sh", *args]


def _mib(ctx: RunContext) -> str:
    return str(int(ctx.opt("size_mib", 8)))


def server_setup(transport: str) -> ArgvBuilder:
    def argv(ctx: RunContext) -> list[str]:
        return _sh(_SERVER_SETUP, export_dir(transport), ctx.client.address, transport,
                   str(PORTS[transport]), _mib(ctx))
    return argv


def server_teardown(ctx: RunContext) -> list[str]:
    return _sh(_SERVER_CLEANUP)


def client_cleanup(ctx: RunContext) -> list[str]:
    return _sh(_CLIENT_CLEANUP)


def client_run(transport: str) -> ArgvBuilder:
    def argv(ctx: RunContext) -> list[str]:
        options = MOUNT_OPTIONS.format(proto=transport, port=PORTS[transport])
        return _sh(_CLIENT_RUN, ctx.server.address, export_dir(transport),
                   mount_dir(transport), transport, str(PORTS[transport]), _mib(ctx), options)
    return argv
