#!/usr/bin/env bash
# Run a project's RDMA tests on rdma-lab in CI: the recipe of docs/workbench.md ("5. In CI").
#
#   rdma-tests.sh RDMA_LAB_DIR [PYTEST_ARGS...]      e.g. rdma-tests.sh ../rdma-lab tests/rdma
#
# For a Debian or Ubuntu runner whose user has passwordless sudo (GitHub's Linux runners).
# labctl runs as root (it makes network namespaces and taps): `labctl doctor` and the tests
# run under sudo, doctor as a plain user fails. The system packages and labctl come from
# rdma-lab's own scripts/setup.sh --minimal (what a qemu lab needs, into RDMA_LAB_DIR/.venv);
# the pytest plugin is added to that virtualenv, and the tests run with its Python: install
# your project's own test requirements into it the same way.
# Environment: LABCTL_CACHE_DIR (node images; cache it between runs) is kept under sudo;
# RDMA_LAB_NAME names the lab (default ci-RUN, RUN being GitHub's run id or this shell's pid).
set -euo pipefail
usage="usage: rdma-tests.sh RDMA_LAB_DIR [PYTEST_ARGS...]"
if [ $# -lt 1 ] || [ ! -x "$1/scripts/setup.sh" ]; then
    echo "rdma-tests.sh: the first argument must be an rdma-lab checkout" >&2
    echo "$usage" >&2
    exit 2
fi
rdma_lab=$(cd "$1" && pwd)
shift
lab=${RDMA_LAB_NAME:-ci-${GITHUB_RUN_ID:-$$}}
venv=$rdma_lab/.venv

sudo "$rdma_lab/scripts/setup.sh" --minimal
sudo "$venv/bin/python" -m pip install -q -e "$rdma_lab[pytest]"
# What the runner can run (qemu, KVM), in the log before the tests start; root, as labctl.
sudo --preserve-env=LABCTL_CACHE_DIR "$venv/bin/labctl" doctor
sudo --preserve-env=LABCTL_CACHE_DIR "$venv/bin/python" -m pytest -v "$@" \
    --rdma-lab-name "$lab"
