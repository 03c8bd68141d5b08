#!/bin/sh
# Init of a container node (under tini, as the container's command). labctl puts
# /etc/labctl/node.env and this code into the container before starting it, then creates
# the node's data interfaces: veths whose container ends appear in this network namespace
# with their final names and MACs. This script waits for them, addresses them, creates
# the node's own RDMA device here (inside its netns) and reports on stdout (the container
# log), as node-init.sh does on a VM's console:
#   "labctl: stage NAME"   progress
#   "labctl: ready ..."    the RDMA port is ACTIVE (dev=, gid=, mtu=, state=)
#   "labctl: fail REASON"  a step failed
set -u
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
say() { echo "labctl: $*"; }
fail() { say "fail $*"; exec sleep infinity; }

[ -r /etc/labctl/node.env ] || fail "missing /etc/labctl/node.env"
. /etc/labctl/node.env
sh /opt/labctl/labctl/nodeside/node-commands.sh || fail "cannot install labctl-devinfo & co"
ip link set lo up

say "stage network"
for spec in $LABCTL_IFACES; do   # name,mac,address/len,mtu
    IFS=, read -r name mac addr mtu <<EOF_SPEC
$spec
EOF_SPEC
    tries=0
    until [ -e "/sys/class/net/$name" ]; do
        tries=$((tries + 1)); [ $tries -gt 3000 ] && fail "data interface $name did not appear"
        sleep 0.1
    done
    ip addr add "$addr" dev "$name" || fail "ip addr add $addr dev $name"
    ip link set "$name" up || fail "ip link set $name up"
done

facts="dev=${LABCTL_RDMA_DEV:-none}"
if [ "$LABCTL_RDMA" != none ]; then
    say "stage rdma"
    # The device is named after lab and node: in shared netns mode every namespace of the
    # kernel sees it, so the name must be unique in the kernel (the node finds its own
    # in /etc/labctl/node.env and $LABCTL_RDMA_DEV).
    rdma link add "$LABCTL_RDMA_DEV" type "$LABCTL_RDMA" netdev "$LABCTL_RDMA_NETDEV" \
        || fail "rdma link add $LABCTL_RDMA_DEV type $LABCTL_RDMA netdev $LABCTL_RDMA_NETDEV"
    ports=/sys/class/infiniband/$LABCTL_RDMA_DEV/ports/1
    tries=0
    until grep -qs ACTIVE "$ports/state"; do
        tries=$((tries + 1)); [ $tries -gt 1000 ] && fail "$LABCTL_RDMA_DEV port not ACTIVE"
        sleep 0.02
    done
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
    mtu=$(ibv_devinfo -d "$LABCTL_RDMA_DEV" -i 1 2>/dev/null \
        | sed -n 's/^[[:space:]]*active_mtu:[[:space:]]*\([0-9]*\).*/\1/p')
    facts="$facts mtu=${mtu:-?} state=$(sed 's/.*: //' "$ports/state")"
fi
say "ready $facts"
exec sleep infinity
