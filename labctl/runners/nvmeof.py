"""NVMe over Fabrics between two nodes: a kernel target (nvmet, set up through configfs) on
the server with one namespace backed by a file in the node's RAM (/dev/shm), the kernel
host (nvme-cli: discover, connect) on the client, over RDMA (nvmet-rdma/nvme-rdma) or TCP
(nvmet-tcp/nvme-tcp).

Everything labctl makes carries its names: subsystems whose NQN starts with NQN_PREFIX,
ports PORT_IDS, backing files /dev/shm/labctl-nvmet-*.img; the cleanup steps remove those
(a run killed midway leaves them) and nothing else.
"""

from __future__ import annotations

from labctl.runners.example_spec import ArgvBuilder, RunContext
from labctl.runners.storageio import IO_FUNCTIONS, PATTERN_FILE, READBACK_FILE

NQN_PREFIX = "nqn.2014-08.org.rdma-lab:labctl."
TRSVCID = 4420  # the IANA port of NVMe over Fabrics, RDMA and TCP alike
PORT_IDS = {"rdma": 7701, "tcp": 7702}  # configfs port numbers (a u16 each)
IMAGE_GLOB = "/dev/shm/labctl-nvmet-*.img"
# The host gives a lost controller this long before it removes it (default 600 s), and
# fails I/O after FAST_IO_FAIL_TMO of it (default: only at the removal): a client whose
# server died fails its I/O within a bound instead of hanging. Seen with a server stopped
# mid-write on rxe: keep-alive noticed it in 5 s, but the first reconnect attempt took 80 s
# (RDMA CM resent its REQ 15 times to a dead host) before the 2 s delays between the rest.
CTRL_LOSS_TMO = 15
RECONNECT_DELAY = 2
FAST_IO_FAIL_TMO = 5
# Seconds the host waits for an admin command's reply, the Fabrics Connect's too (nvme_core
# admin_timeout, 60 by default). On siw in a loaded lab the Connect capsule went unanswered
# twice in a row (`opcode 0x7f (Fabrics Cmd) QID 0 timeout`, `Connect command failed, error
# wo/DNR bit: 881`) and the third try passed: a shorter wait gets to the next try sooner.
ADMIN_TIMEOUT = 20


def nqn(ctx: RunContext, transport: str) -> str:
    """The subsystem's NQN: labctl's prefix, the server node and the transport (node names
    are [a-z][a-z0-9-]*: an NQN may hold them as they are)."""
    return f"{NQN_PREFIX}{ctx.server.node}.{transport}"


def image(transport: str) -> str:
    return f"/dev/shm/labctl-nvmet-{transport}.img"


# $1: NQN prefix. Links of labctl's subsystems first (a linked subsystem cannot go), then
# labctl's ports, then namespaces (disabled first) and subsystems, then the files.
_SERVER_CLEANUP = r"""
C=/sys/kernel/config
grep -q " $C configfs " /proc/mounts || mount -t configfs configfs "$C" 2>/dev/null
N=$C/nvmet
if [ -d "$N" ]; then
  for link in "$N"/ports/*/subsystems/"$1"*; do
    [ -L "$link" ] && rm -f "$link" && echo "labctl: removed port link $link"
  done
  for port in PORTS; do
    [ -d "$N/ports/$port" ] && rmdir "$N/ports/$port" && echo "labctl: removed port $port"
  done
  for subsys in "$N"/subsystems/"$1"*; do
    [ -d "$subsys" ] || continue
    for ns in "$subsys"/namespaces/*; do
      [ -d "$ns" ] || continue
      echo 0 > "$ns/enable"; rmdir "$ns"
    done
    rmdir "$subsys" && echo "labctl: removed subsystem ${subsys##*/}"
  done
fi
for f in IMAGES; do [ -e "$f" ] && rm -f "$f" && echo "labctl: removed $f"; done
true
""".replace("PORTS", " ".join(str(p) for p in PORT_IDS.values())).replace("IMAGES", IMAGE_GLOB)

# $1 prefix, $2 NQN, $3 port id, $4 trtype, $5 traddr, $6 trsvcid, $7 backing file, $8 MiB
_SERVER_SETUP = _SERVER_CLEANUP + r"""
fail() { echo "labctl: failed: $*"; dmesg 2>/dev/null | tail -n 12 | sed 's/^/dmesg: /'; exit 1; }
modprobe nvmet && modprobe "nvmet-$4" || fail "modprobe nvmet-$4"
[ -d "$N" ] || fail "no $N after modprobe nvmet"
S=$N/subsystems/$2
P=$N/ports/$3
truncate -s "${8}M" "$7" || fail "backing file $7"
mkdir "$S" && echo 1 > "$S/attr_allow_any_host" && mkdir "$S/namespaces/1" &&
  echo "$7" > "$S/namespaces/1/device_path" && echo 1 > "$S/namespaces/1/buffered_io" &&
  echo 1 > "$S/namespaces/1/enable" || fail "subsystem $2"
mkdir "$P" && echo "$4" > "$P/addr_trtype" && echo ipv4 > "$P/addr_adrfam" &&
  echo "$5" > "$P/addr_traddr" && echo "$6" > "$P/addr_trsvcid" &&
  ln -s "$S" "$P/subsystems/$2" || fail "port $3 ($4 $5:$6)"
echo "labctl: target $2 on $4 $5:$6 (port $3, namespace 1: $7, ${8} MiB)"
"""

# $1 prefix: disconnect every controller of a labctl subsystem (a run killed midway, or
# a server that went away: the host would retry it for CTRL_LOSS_TMO).
_CLIENT_CLEANUP = r"""
for f in /sys/class/nvme/*/subsysnqn; do
  [ -r "$f" ] || continue
  q=$(cat "$f")
  case $q in
    "$1"*) nvme disconnect -n "$q" >/dev/null 2>&1; echo "labctl: disconnected $q";;
  esac
done
rm -f PATTERN READBACK
true
""".replace("PATTERN", PATTERN_FILE).replace("READBACK", READBACK_FILE)

# $1 prefix, $2 NQN, $3 trtype, $4 traddr, $5 trsvcid, $6 MiB. Discovery and connect are
# tried 3 times (siw's connection setup under a loaded TCG host: docs/reliability.md).
_CLIENT_RUN = IO_FUNCTIONS + r"""
fail() { note "failed: $*"; kernel_log; nvme disconnect -n "$2" >/dev/null 2>&1; exit 1; }
modprobe "nvme-$3" || fail "modprobe nvme-$3"
# A Connect left unanswered fails after admin_timeout (60 s by default), then tried again.
echo ADMIN > /sys/module/nvme_core/parameters/admin_timeout 2>/dev/null
try=1
until nvme discover -t "$3" -a "$4" -s "$5" > /tmp/labctl-discover.log 2>&1 &&
      awk '$1 == "subnqn:" {print $2}' /tmp/labctl-discover.log | grep -qxF "$2"; do
  if [ $try -ge 3 ]; then cat /tmp/labctl-discover.log; fail "discover"; fi
  try=$((try + 1)); sleep 2
done
grep -E '^(trtype|subtype|subnqn|traddr|trsvcid|rdma_cms):' /tmp/labctl-discover.log
note "discovered $2 (try $try)"
try=1
until nvme connect -t "$3" -a "$4" -s "$5" -n "$2" --ctrl-loss-tmo=LOSS \
      --reconnect-delay=DELAY --fast_io_fail_tmo=FAST 2>&1; do
  if [ $try -ge 3 ]; then fail "connect"; fi
  try=$((try + 1)); sleep 2
done
note "connect tries $try"
dev=
for i in $(seq 50); do
  for d in /sys/class/nvme-subsystem/* /sys/class/nvme/*; do
    [ "$(cat "$d/subsysnqn" 2>/dev/null)" = "$2" ] || continue
    for n in "$d"/nvme*n*; do
      b=${n##*/}
      case $b in nvme*c*) continue;; esac
      [ -b "/dev/$b" ] && dev=$b
    done
  done
  [ -n "$dev" ] && break
  sleep 0.2
done
[ -n "$dev" ] || fail "no block device of $2 after connect"
note "device /dev/$dev"
io "/dev/$dev" "$6"; rc=$?
nvme disconnect -n "$2" 2>&1 || { note "failed: disconnect"; rc=1; }
[ $rc = 0 ] || kernel_log
exit $rc
""".replace("LOSS", str(CTRL_LOSS_TMO)).replace("DELAY", str(RECONNECT_DELAY)).replace(
    "FAST", str(FAST_IO_FAIL_TMO)).replace("ADMIN", str(ADMIN_TIMEOUT))


def _sh(script: str, *args: str) -> list[str]:
    return ["sh", "-c", script, "sh", *args]


def server_setup(transport: str) -> ArgvBuilder:
    def argv(ctx: RunContext) -> list[str]:
        return _sh(_SERVER_SETUP, NQN_PREFIX, nqn(ctx, transport), str(PORT_IDS[transport]),
                   transport, ctx.server.address, str(TRSVCID), image(transport),
                   str(int(ctx.opt("size_mib", 8))))
    return argv


def server_teardown(ctx: RunContext) -> list[str]:
    return _sh(_SERVER_CLEANUP, NQN_PREFIX)


def client_cleanup(ctx: RunContext) -> list[str]:
    return _sh(_CLIENT_CLEANUP, NQN_PREFIX)


def client_run(transport: str) -> ArgvBuilder:
    def argv(ctx: RunContext) -> list[str]:
        return _sh(_CLIENT_RUN, NQN_PREFIX, nqn(ctx, transport), transport,
                   ctx.server.address, str(TRSVCID), str(int(ctx.opt("size_mib", 8))))
    return argv
