#!/usr/bin/env bash
# The whole test suite: set up, lint and type-check, then unit and integration tests
# (integration tests boot real qemu nodes with real rxe devices).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/ruff check labctl tests
.venv/bin/mypy labctl
# -rs: every skipped test says why (in CI, as root, a skipped integration test fails:
# tests/integration/conftest.py).
exec .venv/bin/python -m pytest -q -rs -p no:cacheprovider "$@"
