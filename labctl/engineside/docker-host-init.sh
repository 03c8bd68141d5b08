#!/bin/sh
# Starts the Docker engine in the Docker host VM (labctl pipes this to `sh -s` over ssh,
# after the VM's stage 2 (node-init.sh) reported ready). Idempotent: a running engine is
# left alone. Answers one line of labctl's reply format (labctl/nodeside/reply.py):
# {"already_running": true|false} once the engine answers, or the reason it failed (its
# log's end on stderr).
#   /dev/vdb   the engine's data disk (ext4, kept in labctl's cache: imported images survive)
#   dockerd    listens on /run/docker.sock only; no docker0 bridge and no iptables rules,
#              since every container node runs with --network none and gets its links
#              from labctl (veths in the lab's netns, see dockernet.py)
set -u
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
# the reasons are this script's own words: nothing in them needs JSON's escapes
fail() { printf '{"labctl_reply": 1, "ok": false, "error": "%s"}\n' "$*"; exit 1; }
ready() { printf '{"labctl_reply": 1, "ok": true, "data": {"already_running": %s}}\n' "$1"; }

if docker -H unix:///run/docker.sock version >/dev/null 2>&1; then
    ready true
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
# Under a loaded TCG host dockerd can give up on its own containerd ("timeout waiting for
# containerd to start") and exit: a dead dockerd is started again, at most twice, and the
# whole wait is bounded by the clock (a count of polls is no bound when each takes seconds).
start_dockerd() {
    rm -f /run/docker.sock /run/docker.pid
    setsid dockerd --host unix:///run/docker.sock --pidfile /run/docker.pid \
        --bridge=none --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
        --storage-driver=overlay2 --log-driver=json-file \
        >> /var/log/dockerd.log 2>&1 < /dev/null &
    dockerd_pid=$!
}
start_dockerd
starts=1
deadline=$(( $(date +%s) + 240 ))
until docker -H unix:///run/docker.sock version >/dev/null 2>&1; do
    if ! kill -0 "$dockerd_pid" 2>/dev/null; then
        if [ $starts -ge 3 ]; then
            tail -n 20 /var/log/dockerd.log >&2
            fail "dockerd exited $starts times (its log: below)"
        fi
        echo "labctl: dockerd exited; starting it again ($starts of 3)" >&2
        starts=$((starts + 1))
        start_dockerd
    fi
    if [ "$(date +%s)" -gt $deadline ]; then
        tail -n 20 /var/log/dockerd.log >&2
        fail "dockerd did not answer within 240 s (its log: below)"
    fi
    sleep 0.5
done
ready false
