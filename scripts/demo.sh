#!/usr/bin/env bash
# The main job: set up, start a two-node Soft-RoCE lab, run RC pingpong across it over
# RDMA, print the result, and tear the lab down (KEEP=1 leaves it up).
# It removes only the lab it made: when a lab of its name is already there (yours, or a
# demo's kept with KEEP=1), it says so and leaves it alone.
set -euo pipefail
cd "$(dirname "$0")/.."
lab=two-node
./scripts/setup.sh --minimal  # what a qemu lab needs; test.sh installs the rest
labctl=.venv/bin/labctl
labs=${LABCTL_STATE_DIR:-/var/lib/labctl/labs}  # labctl/paths.py's state_root()
if [ -e "$labs/$lab" ]; then
    echo "error: a lab named $lab is already there ($labs/$lab); the demo makes its own and removes it afterwards, so it leaves yours alone" >&2
    echo "hint: use it ('$labctl run pingpong --lab $lab'), or remove it ('$labctl down --lab $lab') and run the demo again" >&2
    exit 2
fi
if [ "${KEEP:-0}" != 1 ]; then
    trap '"$labctl" down --lab "$lab"' EXIT
fi
"$labctl" up topologies/two-node.yaml
"$labctl" run pingpong --lab "$lab" --transport rc --size 4096 --iters 1000
if [ "${KEEP:-0}" = 1 ]; then
    echo "lab left up: try '$labctl status', '$labctl exec node1 -- ibv_devinfo', then '$labctl down --lab $lab'"
fi
