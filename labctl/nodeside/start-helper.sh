#!/bin/sh
# Start the inspector's helper (labctl/verbs/helper.py) in the background and return.
# A container node runs this at the end of its node-init.sh; labctl runs it in VM nodes
# once every node of the lab is ready: its import of pyverbs is about a second of CPU
# under TCG, which would otherwise slow the nodes still booting (four-node `up` 1.3 s).
# At the lowest priority; a second start exits at once (the helper holds a lock).

# A VM node (labctl passes --vm) then drops its page cache, once the helper has bound its
# socket (after its imports): what the boot read (modules, Python's files) is also in the
# host's page cache of the shared root image, so the node's second copy only costs the
# host memory, which free page reporting (virtio_balloon) then gives back: about 30 MiB
# per node (docs/performance.md). Files the node reads again come from the host's cache.
if [ "${1:-}" = --drop-caches-after-helper ]; then
    tries=0
    while [ ! -S /run/labctl/verbs.sock ] && [ "$tries" -lt 600 ]; do
        sleep 0.1
        tries=$((tries + 1))
    done
    echo 1 > /proc/sys/vm/drop_caches
    exit 0
fi

setsid -f nice -n 19 python3 -m labctl.verbs helper </dev/null >>/run/labctl-verbs-helper.log 2>&1
if [ "${1:-}" = --vm ]; then
    # detached too: the ssh session that started this ends at once
    setsid -f sh "$0" --drop-caches-after-helper </dev/null >/dev/null 2>&1
fi
