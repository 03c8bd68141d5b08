#!/usr/bin/env bash
# The whole test suite: set up, lint and type-check, then unit and integration tests
# (integration tests boot real qemu nodes with real rxe devices). Prints how long each
# stage took at the end, also when a stage fails.
set -euo pipefail
cd "$(dirname "$0")/.."
report=$(mktemp -d)
stages=()
started=$SECONDS

print_timings() {
    local rc=$?
    echo
    echo "stage timings (seconds):"
    for line in "${stages[@]}"; do echo "  $line"; done
    echo "  total $((SECONDS - started))"
    if [ -s "$report/junit.xml" ]; then  # the counts last, for whoever reads the last line
        python3 - "$report/junit.xml" <<'EOF'
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suite = root if root.tag == "testsuite" else root.find("testsuite")
# where the time went, by test module (setup, call and teardown: a module's lab counts)
modules: dict[str, float] = {}
for case in suite.iter("testcase"):
    module = case.get("classname", "?")
    module = ".".join(p for p in module.split(".") if not p[:1].isupper())
    modules[module] = modules.get(module, 0.0) + float(case.get("time", 0) or 0)
print("slowest test modules (seconds):")
for module, seconds in sorted(modules.items(), key=lambda kv: -kv[1])[:15]:
    print(f"  {seconds:7.1f}  {module}")
n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
failed = n["failures"] + n["errors"]
print(f"tests: {n['tests'] - failed - n['skipped']} passed, {failed} failed, {n['skipped']} skipped")
EOF
    fi
    rm -rf "$report"
    exit "$rc"
}
trap print_timings EXIT

stage() {  # stage NAME COMMAND...: run it, remember how long it took
    local name=$1 t0=$SECONDS
    shift
    "$@" || { local rc=$?; stages+=("$name $((SECONDS - t0)) (failed)"); return "$rc"; }
    stages+=("$name $((SECONDS - t0))")
}

stage setup ./scripts/setup.sh  # everything the tests need (demo.sh: --minimal)
stage lint .venv/bin/ruff check labctl tests
stage typecheck .venv/bin/mypy labctl
# -rs: every skipped test says why (in CI, as root, a skipped integration test fails:
# tests/integration/conftest.py).
stage tests .venv/bin/python -m pytest -q -rs -p no:cacheprovider --durations=15 \
    --junitxml="$report/junit.xml" "$@"
