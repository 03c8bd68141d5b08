#!/usr/bin/env bash
# The main job: set up, start a two-node Soft-RoCE lab, run RC pingpong across it over
# RDMA, print the result, and tear the lab down (KEEP=1 leaves it up).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --minimal  # what a qemu lab needs; test.sh installs the rest
labctl=.venv/bin/labctl
if [ "${KEEP:-0}" != 1 ]; then
    trap '"$labctl" down --lab two-node' EXIT
fi
"$labctl" up topologies/two-node.yaml
"$labctl" run pingpong --lab two-node --transport rc --size 4096 --iters 1000
if [ "${KEEP:-0}" = 1 ]; then
    echo "lab left up: try '$labctl status', '$labctl exec node1 -- ibv_devinfo', then '$labctl down'"
fi
