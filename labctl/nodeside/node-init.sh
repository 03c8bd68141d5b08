#!/bin/sh
# Stage 2 of a lab node, run by tini as PID 1 on the node's root disk.
# Reads /etc/labctl/node.env (written by labctl for this node), brings up management and
# data interfaces, sshd and the RDMA device, then reports on the serial console:
#   "labctl: stage NAME"   progress
#   "labctl: ready ..."    every step done and the RDMA port ACTIVE
#   "labctl: fail REASON"  a step failed (labctl shows it and the console tail)
set -u
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
say() { read -r up _ < /proc/uptime; echo "labctl: $* [t=$up]" > /dev/ttyS0; }
fail() { say "fail $*"; exec sleep infinity; }

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm /run /tmp
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /dev/shm
[ -r /etc/labctl/node.env ] || fail "missing /etc/labctl/node.env"
. /etc/labctl/node.env
hostname "$LABCTL_NODE"
echo "$LABCTL_NODE" > /etc/hostname
sh /opt/labctl/labctl/nodeside/node-commands.sh || fail "cannot install labctl-devinfo & co"

say "stage modules"
# Entropy from the host (virtio-rng): otherwise sshd waits seconds for the kernel's CRNG.
modprobe virtio_rng 2>/dev/null
modprobe virtio_net || fail "modprobe virtio_net"
for module in ib_uverbs rdma_ucm; do
    modprobe "$module" || fail "modprobe $module"
done
case "$LABCTL_RDMA" in
    rxe) modprobe rdma_rxe || fail "modprobe rdma_rxe (kernel without Soft-RoCE?)" ;;
    siw) modprobe siw || fail "modprobe siw (module not built into this image?)" ;;
esac

say "stage network"
ip link set lo up
# Interfaces are found by the MAC addresses labctl gave them, then named as the topology says.
rename_by_mac() {  # mac name
    for dev in /sys/class/net/*; do
        if [ "$(cat "$dev/address")" = "$1" ]; then
            cur=${dev##*/}
            [ "$cur" = "$2" ] || ip link set "$cur" name "$2"
            return 0
        fi
    done
    return 1
}
tries=0
until rename_by_mac "$LABCTL_MGMT_MAC" eth0; do
    tries=$((tries + 1)); [ $tries -gt 300 ] && fail "management NIC not found"; sleep 0.02
done
ip addr add 10.0.2.15/24 dev eth0
ip link set eth0 up
for spec in $LABCTL_IFACES; do   # name,mac,address/len,mtu
    IFS=, read -r name mac addr mtu <<EOF_SPEC
$spec
EOF_SPEC
    rename_by_mac "$mac" "$name" || fail "data NIC $name ($mac) not found"
    ip link set "$name" mtu "$mtu"
    ip addr add "$addr" dev "$name"
    ip link set "$name" up
done

say "stage sshd"
mkdir -p /root/.ssh /run/sshd
chmod 700 /root/.ssh
cp /etc/labctl/authorized_keys /root/.ssh/authorized_keys
chmod 600 /root/.ssh/authorized_keys
rm -f /etc/ssh/ssh_host_ed25519_key /etc/ssh/ssh_host_ed25519_key.pub  # a repaired node boots again
ssh-keygen -q -t ed25519 -N "" -f /etc/ssh/ssh_host_ed25519_key
# The same in the config, so `sshd -T` and any sshd started later agree: keys only.
mkdir -p /etc/ssh/sshd_config.d
printf '%s\n' 'PasswordAuthentication no' 'KbdInteractiveAuthentication no' \
    'PermitRootLogin prohibit-password' > /etc/ssh/sshd_config.d/00-labctl.conf
/usr/sbin/sshd -o PasswordAuthentication=no -o KbdInteractiveAuthentication=no \
    -o PermitRootLogin=prohibit-password -o UseDNS=no -o HostKey=/etc/ssh/ssh_host_ed25519_key \
    -o ListenAddress=10.0.2.15 || fail "sshd did not start"

if [ "$LABCTL_RDMA" != none ]; then
    say "stage rdma"
    rdma link add "$LABCTL_RDMA_DEV" type "$LABCTL_RDMA" netdev "$LABCTL_RDMA_NETDEV" \
        || fail "rdma link add $LABCTL_RDMA_DEV type $LABCTL_RDMA netdev $LABCTL_RDMA_NETDEV"
    state=/sys/class/infiniband/$LABCTL_RDMA_DEV/ports/1/state
    tries=0
    until grep -qs ACTIVE "$state"; do
        tries=$((tries + 1)); [ $tries -gt 1000 ] && fail "$LABCTL_RDMA_DEV port not ACTIVE"; sleep 0.02
    done
fi
# The ready line carries what `labctl up` shows, so it needs no extra round trip.
facts="dev=${LABCTL_RDMA_DEV:-none}"
if [ "$LABCTL_RDMA" != none ]; then
    ports=/sys/class/infiniband/$LABCTL_RDMA_DEV/ports/1
    for gid in "$ports"/gids/*; do
        index=${gid##*/}
        case "$(cat "$gid" 2>/dev/null)" in
            0000:0000:0000:0000:0000:ffff:*)
                if [ "$(cat "$ports/gid_attrs/types/$index" 2>/dev/null)" = "RoCE v2" ]; then
                    facts="$facts gid=$index"
                    break
                fi ;;
        esac
    done
    mtu=$(ibv_devinfo -d "$LABCTL_RDMA_DEV" -i 1 2>/dev/null | sed -n 's/^[[:space:]]*active_mtu:[[:space:]]*\([0-9]*\).*/\1/p')
    facts="$facts mtu=${mtu:-?} state=$(sed 's/.*: //' "$ports/state")"
fi
say "ready $facts"
while :; do sleep 3600; done
