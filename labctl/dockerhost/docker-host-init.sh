#!/bin/sh
# Starts the Docker engine in the Docker host VM (labctl pipes this to `sh -s` over ssh,
# after the VM's stage 2 (node-init.sh) reported ready). Idempotent: a running engine is
# left alone. Prints "labctl: engine ready" or "labctl: engine fail REASON".
#   /dev/vdb   the engine's data disk (ext4, kept in labctl's cache: imported images survive)
#   dockerd    listens on /run/docker.sock only; no docker0 bridge and no iptables rules,
#              since every container node runs with --network none and gets its links
#              from labctl (veths in the lab's netns, see dockernet.py)
set -u
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
fail() { echo "labctl: engine fail $*"; exit 1; }

if docker -H unix:///run/docker.sock version >/dev/null 2>&1; then
    echo "labctl: engine ready (already running)"
    exit 0
fi
for module in overlay veth bridge ib_uverbs rdma_ucm rdma_rxe; do
    modprobe "$module" || fail "modprobe $module"
done
modprobe siw 2>/dev/null || true   # present when the image built it (soft-iWARP nodes)
mountpoint -q /sys/fs/cgroup || mount -t cgroup2 cgroup2 /sys/fs/cgroup || fail "mount cgroup2"
mkdir -p /var/lib/docker
if ! mountpoint -q /var/lib/docker; then
    [ -b /dev/vdb ] || fail "no data disk /dev/vdb"
    mount -t ext4 -o noatime /dev/vdb /var/lib/docker || fail "cannot mount /dev/vdb"
fi
mkdir -p /run/netns
rm -f /run/docker.sock /run/docker.pid
setsid dockerd --host unix:///run/docker.sock --pidfile /run/docker.pid \
    --bridge=none --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
    --storage-driver=overlay2 --log-driver=json-file \
    > /var/log/dockerd.log 2>&1 < /dev/null &
tries=0
until docker -H unix:///run/docker.sock version >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ $tries -gt 600 ]; then
        tail -n 20 /var/log/dockerd.log
        fail "dockerd did not answer within 120 s"
    fi
    sleep 0.2
done
echo "labctl: engine ready"
