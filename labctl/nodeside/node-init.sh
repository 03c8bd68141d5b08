#!/bin/sh
# The one bring-up of a lab node, for every kind of node (LABCTL_NODE_KIND):
#   vm         qemu node: stage 2 under tini on the node's root disk (the default)
#   container  container node: the image's CMD under tini (container-init.sh sets the kind)
#   vagrant    Vagrant VM: labctl-node.service at every boot (`start`; `stop` removes
#              the device), installed by the Vagrantfile
# Reads /etc/labctl/node.env (written by labctl for this node), names and addresses the
# NICs by the MACs labctl gave them, turns on forwarding (routers) and adds routes,
# creates the RDMA device and reports:
#   "labctl: stage NAME"   progress
#   "labctl: ready ..."    every step done and the RDMA port ACTIVE (dev=, gid=, mtu=, state=)
#   "labctl: fail STEP"    a step failed (labctl shows it with the console tail)
# VM nodes report on the serial console, the others on stdout (container log, journal).
# Every step is checked; anything unchecked that fails still ends in a "fail" line (EXIT
# trap), and VM and container nodes then stay up for diagnosis instead of vanishing.
# Under emulation (TCG) every program started costs 30-300 ms of a node's boot: shell
# builtins read sysfs, and one modprobe, one mount and one `ip -batch` do the work of many
# (docs/performance.md, "Bring-up profile").
set -eu
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
KIND=${LABCTL_NODE_KIND:-vm}
ACTION=${1:-start}
STEP=start

say() {
    if [ "$KIND" = vm ]; then
        read -r up _ < /proc/uptime || up=?
        echo "labctl: $* [t=$up]" > /dev/ttyS0
    else
        echo "labctl: $*"
    fi
}
stay() {  # VM and container nodes: keep running (labctl reads the report, `down` ends it)
    if [ "$KIND" = vagrant ]; then exit 1; fi
    exec sleep infinity
}
fail() { trap - EXIT; say "fail $*"; stay; }
on_exit() {
    rc=$?
    if [ "$rc" = 0 ]; then return 0; fi
    say "fail step $STEP exited $rc"
    stay
}
trap on_exit EXIT
step() { STEP=$1; say "stage $1"; }
must() {  # must WHAT COMMAND...: run COMMAND, or fail naming WHAT
    what=$1; shift
    "$@" || fail "$what"
}
listening() {  # listening ADDR:PORT (as /proc/net/tcp writes it): true once a socket does
    while read -r _ local _ state _; do
        if [ "$local" = "$1" ] && [ "$state" = 0A ]; then return 0; fi
    done < /proc/net/tcp
    return 1
}

if [ "$KIND" = vm ]; then
    STEP=mounts
    # /proc /sys /dev/pts /run /run/lock /tmp /dev/shm /dev/mqueue (stage 1 made /dev's links)
    must "mount -a -T vm-fstab.conf (/proc /sys /run /tmp, /dev's pts shm mqueue)" \
        mount -a -T /opt/labctl/labctl/nodeside/vm-fstab.conf
fi
test -r /etc/labctl/node.env || fail "missing /etc/labctl/node.env"
. /etc/labctl/node.env

if [ "$ACTION" = stop ]; then  # vagrant: the unit's ExecStop
    if [ -n "$LABCTL_RDMA_DEV" ] && [ -e "/sys/class/infiniband/$LABCTL_RDMA_DEV" ]; then
        rdma link delete "$LABCTL_RDMA_DEV" || true
    fi
    trap - EXIT
    exit 0
fi
# labctl-devinfo & co, and `python3 -m labctl.verbs` without PYTHONPATH (a Vagrant node
# has labctl's code only where the Vagrantfile put it).
if [ "$KIND" != vagrant ] || [ -f /opt/labctl/labctl/nodeside/node-commands.sh ]; then
    must "install labctl-devinfo & co" sh /opt/labctl/labctl/nodeside/node-commands.sh
fi

# A node on a kernel of the user's own: the image has modules for its own kernel only;
# this kernel's are on a read-only disk labctl made (labctl/images/kernels.py).
if [ -n "${LABCTL_KERNEL_MODULES:-}" ]; then
    step kernel-modules
    release=$(uname -r)
    mkdir -p "/usr/lib/modules/$release"
    must "mount the modules of kernel $release ($LABCTL_KERNEL_MODULES)" \
        mount -t ext4 -o ro,noatime "$LABCTL_KERNEL_MODULES" "/usr/lib/modules/$release"
fi
modules=""
case "$KIND" in
    # virtio_rng: entropy from the host, or sshd waits seconds for the CRNG.
    # virtio_balloon: free page reporting, the guest's free memory back to the host.
    # tcp_diag: `ss` (the runners' check that a server listens) would load it at the
    # first run, a modprobe under emulation in the middle of it.
    # loop: /dev/loop-control and /dev/loop0-7, which Debian's udev would load on demand.
    vm) modules="virtio_rng virtio_net virtio_balloon ib_uverbs rdma_ucm tcp_diag loop" ;;
    vagrant) modules="ib_uverbs rdma_ucm loop" ;;
esac
case "$KIND:$LABCTL_RDMA" in
    container:*) ;;  # a container cannot load modules: the engine's kernel has them
    *:rxe) modules="$modules rdma_rxe" ;;
    *:siw) modules="$modules siw" ;;
esac
if [ -n "$modules" ]; then
    step modules
    # shellcheck disable=SC2086  # one word per module
    if ! modprobe -a $modules; then
        for module in $modules; do
            [ -d "/sys/module/$module" ] || fail "modprobe $module (kernel $(uname -r))"
        done
        fail "modprobe -a $modules (kernel $(uname -r))"
    fi
fi
# configfs (nvmet, usb gadgets, ...), as systemd mounts it: its directory is there once
# rdma_cm (rdma_ucm above) has loaded the module.
if [ "$KIND" = vm ] && [ -d /sys/kernel/config ]; then
    must "mount configfs on /sys/kernel/config" mount -t configfs configfs /sys/kernel/config
fi

# A machine labctl saves for restores (labctl/vm/saved.py) stops here, before anything
# node-specific: its inspector's helper imports pyverbs (a restored node's is warm), the
# page cache goes back (a smaller saved state), then identity.py waits on the second serial
# port. labctl saves the machine while it waits; each node restored from it gets its own
# identity there (node.env, ssh keys, MACs, clock) and goes on from here as a cold boot does.
restored=0
if [ "$KIND" = vm ] && [ "${LABCTL_SAVE:-0}" = 1 ]; then
    step saving
    LABCTL_HELPER_AFTER=/run/labctl/node.ready setsid -f nice -n 19 \
        python3 -m labctl.verbs helper </dev/null >>/run/labctl-verbs-helper.log 2>&1
    must "reclaim the page cache" sh /opt/labctl/labctl/nodeside/start-helper.sh \
        --reclaim-after-helper
    must "warm the page cache" sh /opt/labctl/labctl/nodeside/start-helper.sh \
        --warm-for-restore
    STEP=identity
    python3 /opt/labctl/labctl/nodeside/identity.py /dev/ttyS1 /dev/ttyS0 \
        || fail "identity from labctl on ttyS1 (see the line above)"
    . /etc/labctl/node.env
    restored=1
fi
if [ "$KIND" = vm ]; then
    echo "$LABCTL_NODE" > /proc/sys/kernel/hostname || fail "hostname $LABCTL_NODE"
    echo "$LABCTL_NODE" > /etc/hostname
fi

# udev, as on a Debian machine: /dev/disk/by-id, by-path, by-uuid, by-loop-*, the links
# and modes its rules give devices, and the links of every device made later (loop, nvme,
# dm and multipath devices a test suite creates). Started after the point where a machine
# is saved for restores, in restored nodes too: udevd reads the kernel's boot_id, which
# the kernel makes once, at its first read; read before the save, every node restored from
# that machine would have the same boot_id. The kernel command line has
# net.ifnames=0 (labctl/vm/machine.py KERNEL_APPEND): udev keeps the kernel's ethN names,
# which the network step below renames by MAC as it always did.
# Of the devices that exist before udevd, only the virtio disks' events are replayed
# (coldplug): replaying all of them (about 300: ttys, ACPI, PCI, CPUs...) cost 24 s of a
# TCG node's boot, some 80 ms an event with no one slow rule, much of it in loading the
# drivers of the emulated PC's floppy, IDE, PC speaker, PS/2 mouse and of KVM, which no
# lab uses (docs/nodes.md). The loop devices are left out too (8 events, about 3 s under
# load): unbound, no rule gives them a link; binding one (losetup) sends the event that
# does. Devices made after udevd started get every rule, as on Debian.
if [ "$KIND" = vm ]; then
    step udev
    must "systemd-udevd --daemon" /usr/lib/systemd/systemd-udevd --daemon
    must "udevadm trigger (virtio disks)" udevadm trigger --type=devices \
        --subsystem-match=block --sysname-match='vd*' --action=add
    # Bounded: events still queued after this are a node that cannot be trusted.
    must "udevadm settle: udev events still queued after 60 s" udevadm settle --timeout=60
fi

# Host folders (qemu nodes): virtio-9p shares named labctlN, "TAG,DST,MODE" words.
if [ "$KIND" = vm ] && [ -n "${LABCTL_MOUNTS:-}" ]; then
    step folders
    must "modprobe 9pnet_virtio 9p (kernel $(uname -r))" modprobe -a 9pnet_virtio 9p
    for spec in $LABCTL_MOUNTS; do
        IFS=, read -r tag dst mode <<EOF_MOUNT
$spec
EOF_MOUNT
        must "mkdir $dst" mkdir -p "$dst"
        must "mount host folder $tag on $dst ($mode)" mount -t 9p \
            -o "trans=virtio,version=9p2000.L,msize=262144,$mode" "$tag" "$dst"
    done
fi

step network
if [ "$KIND" = vagrant ]; then udevadm settle --timeout=30 || true; fi
dev_by_mac() {  # mac -> the interface's current name (builtins only: no program started)
    for dev in /sys/class/net/*; do
        address=
        read -r address 2>/dev/null < "$dev/address" || true
        if [ "$address" = "$1" ]; then
            echo "${dev##*/}"
            return 0
        fi
    done
    return 1
}
# name,mac pairs to bring up: the management NIC (VM nodes) and the data NICs.
nics=""
if [ "$KIND" = vm ]; then nics="eth0,$LABCTL_MGMT_MAC"; fi
for spec in $LABCTL_IFACES; do   # name,mac,address/len,mtu
    nics="$nics ${spec%,*,*}"
done
# Container NICs appear when labctl plumbs them (after every container started).
case "$KIND" in container) ticks=6000 ;; *) ticks=300 ;; esac
# Every change goes into one `ip -4 -batch` (IPv4 only: labctl's addresses are). Renames in
# two passes: temporary names first, so that no rename hits a name still in use.
nl='
'
batch="link set lo up$nl"
n=0
finals=""
for nic in $nics; do
    name=${nic%%,*}; mac=${nic#*,}
    tries=0
    until cur=$(dev_by_mac "$mac"); do
        tries=$((tries + 1))
        if [ "$tries" -gt "$ticks" ]; then fail "NIC $name ($mac) not found"; fi
        sleep 0.05
    done
    if [ "$cur" != "$name" ]; then
        batch="${batch}link set $cur down${nl}link set $cur name labctl$n$nl"
        finals="$finals labctl$n,$name"
    fi
    n=$((n + 1))
done
for rename in $finals; do
    batch="${batch}link set ${rename%,*} name ${rename#*,}$nl"
done
if [ "$KIND" = vm ]; then
    batch="${batch}addr replace 10.0.2.15/24 dev eth0${nl}link set eth0 up$nl"
fi
for spec in $LABCTL_IFACES; do
    IFS=, read -r name mac addr mtu <<EOF_SPEC
$spec
EOF_SPEC
    batch="${batch}link set $name mtu $mtu${nl}addr flush dev $name$nl"
    batch="${batch}addr add $addr dev $name${nl}link set $name up$nl"
    if [ "$KIND" = vagrant ]; then say "$name $mac $addr mtu $mtu"; fi
done
# ip's stdout says nothing. Its error names the failed line ("Command failed -:N"), except
# for the errors ip exits on at once (a malformed address): then every line is shown.
if ! errors=$(ip -4 -batch - 2>&1 >/dev/null <<EOF_BATCH
$batch
EOF_BATCH
); then
    case "$errors" in
        *"Command failed -:"*) number=${errors##*-:} ;;
        *) number=all ;;
    esac
    i=0; failed=
    while IFS= read -r line; do
        i=$((i + 1))
        if [ "$number" = all ]; then say "network: ip $line"; fi
        if [ "$i" = "$number" ]; then failed="ip $line: "; fi
    done <<EOF_LINES
$batch
EOF_LINES
    fail "$failed${errors%%"$nl"*} (network setup: is a name taken?)"
fi

# Routed labs: a router forwards between its segments; nodes reach the segments they are
# not on through the gateways labctl worked out (LABCTL_ROUTES: "to,via to,via ...").
if [ "${LABCTL_ROUTER:-0}" = 1 ]; then
    step forwarding
    forward=/proc/sys/net/ipv4/ip_forward
    # A container's /proc/sys is read-only: docker set it at creation.
    if [ "$(cat "$forward")" != 1 ]; then
        echo 1 > "$forward" || fail "IPv4 forwarding (net.ipv4.ip_forward)"
    fi
fi
if [ -n "${LABCTL_ROUTES:-}" ]; then
    step routes
    for route in $LABCTL_ROUTES; do
        to=${route%,*}; via=${route#*,}
        must "ip route add $to via $via" ip route replace "$to" via "$via"
    done
fi

if [ "$KIND" = vm ]; then
    step sshd
    # The payload put /root/.ssh/authorized_keys and the host key labctl made for this node
    # (its known_hosts pins it) in place. Node images serve ssh with dropbear: a login costs
    # a TCG node about 0.3 s against about 1 s with OpenSSH 10's sshd, which execs two
    # programs per login, each linking libcrypto and some twenty more libraries (labctl
    # opens a master connection to every node at each `up`: docs/performance.md). Keys
    # only (-s), no motd (-m). The Docker host VM's image has no dropbear: OpenSSH's sshd
    # forwards its engine's unix socket, which dropbear does not (sshd_config.d/00-labctl.conf:
    # keys only, no PAM; PAM's modules start programs at every login).
    if [ -x /usr/sbin/dropbear ]; then
        key=/run/labctl/dropbear_ed25519_host_key
        must "mkdir /run/labctl" mkdir -p -m 700 /run/labctl
        must "convert the host key for dropbear" dropbearconvert openssh dropbear \
            /etc/ssh/ssh_host_ed25519_key "$key" 2>/dev/null
        must "dropbear did not start" dropbear -r "$key" -p 10.0.2.15:22 -s -m \
            -P /run/dropbear.pid
        # dropbear binds its port after it forked into the background: `labctl up` opens
        # its ssh master once this stage is over, and a refused connection costs it 0.5 s.
        tries=0
        until listening 0F02000A:0016; do
            tries=$((tries + 1))
            if [ "$tries" -gt 500 ]; then fail "dropbear does not listen on 10.0.2.15:22"; fi
            sleep 0.01
        done
    else
        must "mkdir /run/sshd" mkdir -p /run/sshd  # sshd's privilege separation directory
        must "sshd did not start" /usr/sbin/sshd -o PasswordAuthentication=no \
            -o KbdInteractiveAuthentication=no -o PermitRootLogin=prohibit-password \
            -o UseDNS=no -o UsePAM=no -o PrintLastLog=no \
            -o HostKey=/etc/ssh/ssh_host_ed25519_key -o ListenAddress=10.0.2.15
    fi
fi

facts="dev=${LABCTL_RDMA_DEV:-none}"
if [ "$LABCTL_RDMA" != none ] && [ -n "$LABCTL_RDMA_DEV" ]; then
    step rdma
    # Container nodes share one kernel: their device names are unique per lab and node.
    if [ ! -e "/sys/class/infiniband/$LABCTL_RDMA_DEV" ]; then
        must "rdma link add $LABCTL_RDMA_DEV type $LABCTL_RDMA netdev $LABCTL_RDMA_NETDEV" \
            rdma link add "$LABCTL_RDMA_DEV" type "$LABCTL_RDMA" netdev "$LABCTL_RDMA_NETDEV"
    fi
    # Several devices (qemu nodes): one more per listed interface, "rxe1,eth2 ...".
    for extra in ${LABCTL_RDMA_EXTRA:-}; do
        dev=${extra%,*}; netdev=${extra#*,}
        must "rdma link add $dev type $LABCTL_RDMA netdev $netdev" \
            rdma link add "$dev" type "$LABCTL_RDMA" netdev "$netdev"
    done
    for dev in "$LABCTL_RDMA_DEV" $(for e in ${LABCTL_RDMA_EXTRA:-}; do echo "${e%,*}"; done); do
        tries=0
        while :; do
            state=
            read -r state 2>/dev/null < "/sys/class/infiniband/$dev/ports/1/state" || true
            case "$state" in *ACTIVE) break ;; esac
            tries=$((tries + 1))
            if [ "$tries" -gt 1000 ]; then fail "$dev port not ACTIVE"; fi
            sleep 0.02
        done
    done
    ports=/sys/class/infiniband/$LABCTL_RDMA_DEV/ports/1
    # The ready line carries what `labctl up` shows, so it needs no extra round trip.
    for gid in "$ports"/gids/*; do
        index=${gid##*/}
        value=; type=
        read -r value 2>/dev/null < "$gid" || true
        case "$value" in
            0000:0000:0000:0000:0000:ffff:*)
                read -r type 2>/dev/null < "$ports/gid_attrs/types/$index" || true
                if [ "$type" = "RoCE v2" ]; then
                    facts="$facts gid=$index"
                    break
                fi ;;
        esac
    done
    mtu=
    # "active_mtu:  1024 (3)"
    while read -r key value _; do
        if [ "$key" = active_mtu: ]; then mtu=$value; fi
    done <<EOF_DEVINFO
$(ibv_devinfo -d "$LABCTL_RDMA_DEV" -i 1 2>/dev/null)
EOF_DEVINFO
    state=
    read -r state < "$ports/state"
    facts="$facts mtu=${mtu:-?} state=${state#*: }"
fi
# A restored node's helper lists the devices now (it waited for them: see above).
if [ "$restored" = 1 ]; then : > /run/labctl/node.ready; fi
trap - EXIT
say "ready $facts"
if [ "$KIND" = vagrant ]; then exit 0; fi
# The inspector's helper: a container's own, now; a VM's from labctl once the lab is up
# (labctl/nodeside/start-helper.sh says why).
if [ "$KIND" = container ]; then sh /opt/labctl/labctl/nodeside/start-helper.sh; fi
while :; do sleep 3600; done
