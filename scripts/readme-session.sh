#!/usr/bin/env bash
# Produce README.md's sample session from a real run: boots a two-node rxe lab under the
# name LAB (default two-node; a copy of topologies/two-node.yaml with that name), runs the
# commands the README shows, prints each one after a "# " prompt followed by its real output
# (stdout and stderr, as rich prints them when stdout is not a terminal), and takes the
# lab down (KEEP=1 leaves it up); a lab of that name already there is refused, untouched.
# Run as root from anywhere; paste the output into README.md's "A session".
# Re-run it when an output format changes (tests/unit/test_docs.py checks the commands).
set -euo pipefail
cd "$(dirname "$0")/.."
lab=${1:-two-node}
if ! [[ $lab =~ ^[a-z][a-z0-9-]{0,19}$ ]]; then
    echo "readme-session.sh: bad lab name '$lab'" >&2
    exit 2
fi
labs=${LABCTL_STATE_DIR:-/var/lib/labctl/labs}  # labctl/paths.py's state_root()
if [ -e "$labs/$lab" ]; then  # it removes the lab at the end: only one it made
    echo "error: a lab named $lab is already there ($labs/$lab); this script makes its own and removes it afterwards" >&2
    echo "hint: run it with another name (scripts/readme-session.sh NAME), or remove that lab ('labctl down --lab $lab')" >&2
    exit 2
fi
export PATH="$PWD/.venv/bin:$PATH"
topology=topologies/two-node.yaml
if [ "$lab" != two-node ]; then
    topology=${TMPDIR:-/tmp}/$lab.yaml
    echo "# sed 's/^name: two-node\$/name: $lab/' topologies/two-node.yaml > $topology"
    sed "s/^name: two-node\$/name: $lab/" topologies/two-node.yaml > "$topology"
fi
lab_args=(--lab "$lab")  # other labs may be up on this host
log=$(mktemp)
if [ "${KEEP:-0}" != 1 ]; then
    trap 'labctl down --lab "$lab" >/dev/null 2>&1 || true; rm -f "$log"' EXIT
fi

show() {  # print the command as typed, then run it; stderr (progress lines) only on failure
    echo "# $*"
    if ! "$@" 2>"$log"; then
        cat "$log" >&2
        exit 1
    fi
}

show labctl up "$topology"
show labctl run pingpong "${lab_args[@]}" --transport rc --size 4096 --iters 200
show labctl exec "${lab_args[@]}" node1 -- ibv_devices
show labctl devices "${lab_args[@]}" node1
if [ "${KEEP:-0}" != 1 ]; then
    show labctl down "${lab_args[@]}"
    trap 'rm -f "$log"' EXIT
fi
