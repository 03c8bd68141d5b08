#!/bin/sh
# Start the inspector's helper (labctl/verbs/helper.py) in the background and return.
# A container node runs this at the end of its node-init.sh; labctl runs it in VM nodes
# once every node of the lab is ready: its import of pyverbs is about a second of CPU
# under TCG, which would otherwise slow the nodes still booting (four-node `up` 1.3 s).
# At the lowest priority; a second start exits at once (the helper holds a lock).

# A VM node (labctl passes --vm) then gives back the memory of its page cache, once the
# helper has bound its socket (after its imports): what the boot and the import read
# (modules, Python's files) is also in the host's page cache of the shared root image, so
# the node's second copy only costs the host memory, which free page reporting
# (virtio_balloon) then returns (docs/performance.md). memory.reclaim (cgroup v2) also
# evicts the pages running programs map (the helper's Python, sshd), which drop_caches
# leaves: about 11 MiB more per node; a page needed again is read back from the host's
# cache. Once per boot, before any user program runs (/run is empty at each boot; labctl
# starts the helper in every node again after a repair of one, when the others may be
# running a user's programs). What it did: /run/labctl/reclaim.log.
if [ "${1:-}" = --reclaim-after-helper ]; then
    [ -e /run/labctl/reclaim.log ] && exit 0
    tries=0
    # a helper started for a saved machine says when its imports are done: it serves once
    # the restored node has its devices (node-init.sh)
    while [ ! -S /run/labctl/verbs.sock ] && [ ! -e /run/labctl/helper.preloaded ] \
        && [ "$tries" -lt 600 ]; do
        sleep 0.1
        tries=$((tries + 1))
    done
    cache_kib() { awk '/^(Cached|Mapped):/ { printf "%s %s kB ", $1, $2 }' /proc/meminfo; }
    before=$(cache_kib)
    grep -q '^[^ ]* /sys/fs/cgroup cgroup2 ' /proc/mounts \
        || mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
    how=drop_caches
    if [ -w /sys/fs/cgroup/memory.reclaim ]; then
        # more than the node has: it ends with EAGAIN once nothing more can go
        echo 1G > /sys/fs/cgroup/memory.reclaim 2>/dev/null
        how="memory.reclaim, drop_caches"
    fi
    echo 1 > /proc/sys/vm/drop_caches
    mkdir -p -m 700 /run/labctl  # the helper's directory, were it not up within 60 s
    echo "$how: $before-> $(cache_kib)" > /run/labctl/reclaim.log
    exit 0
fi

# A machine saved for restores (node-init.sh), once reclaimed: what a restored node runs
# before the user's first command is read back into the page cache, and so saved with the
# machine. A restored node would otherwise read it from its disk under emulation, while
# labctl waits: the programs of its bring-up (ip, rdma, ibv_devinfo and the verbs
# providers), of the ssh server and the login labctl opens at once (dropbear; OpenSSH's
# sshd-session and sshd-auth where the image has no dropbear) and the files the waiting
# helper maps (its first request runs in them).
if [ "${1:-}" = --warm-for-restore ]; then
    programs=""
    if [ -x /usr/sbin/dropbear ]; then
        programs="/usr/sbin/dropbear /usr/bin/dropbearconvert"
    else
        programs="/usr/sbin/sshd /usr/lib/openssh/sshd-session /usr/lib/openssh/sshd-auth"
    fi
    for name in ip rdma ibv_devinfo; do programs="$programs $(command -v "$name" || true)"; done
    programs="$programs $(echo /usr/lib/*/libibverbs/*.so)"
    helper=$(pgrep -o -f 'labctl[.]verbs helper' || true)
    {
        # shellcheck disable=SC2086  # one word per path (system paths: no blanks)
        ldd $programs 2>/dev/null | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }'
        echo "$programs" | tr ' ' '\n'
        if [ -n "$helper" ]; then awk '$6 ~ /^\// { print $6 }' "/proc/$helper/maps"; fi
    } | sort -u | while read -r file; do
        if [ -f "$file" ]; then cat "$file"; fi
    done > /dev/null
    exit 0
fi

setsid -f nice -n 19 python3 -m labctl.verbs helper </dev/null >>/run/labctl-verbs-helper.log 2>&1
if [ "${1:-}" = --vm ]; then
    # detached too: the ssh session that started this ends at once
    setsid -f sh "$0" --reclaim-after-helper </dev/null >/dev/null 2>&1
fi
