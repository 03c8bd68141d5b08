#!/usr/bin/env bash
# The whole test suite: set up, lint and type-check, then the unit tests and the
# integration tests (they boot real qemu nodes with real rxe devices), each in parallel.
# Prints how long each stage took at the end, also when a stage fails.
#   scripts/test.sh [PYTEST ARGS...]   paths pick the run (unit, integration) they belong to
set -euo pipefail
cd "$(dirname "$0")/.."
report=$(mktemp -d)
stages=()
started=$SECONDS
# The unit tests run in TEST_WORKERS processes (pytest-xdist; 0: in pytest's own process),
# the integration tests after them in INTEGRATION_WORKERS (1: one module at a time): a
# module at a time in each, with its own lab names (tests/integration/conftest.py), the
# longest first. A lab waits for its guests much of the time, so two share 2 cores well.
# The images the integration tests boot are built beside lint, types and unit.
workers=${TEST_WORKERS:-2}
live_workers=${INTEGRATION_WORKERS:-2}
images_pid=""

print_timings() {
    local rc=$?
    echo
    if [ -n "$images_pid" ] && kill -0 "$images_pid" 2>/dev/null; then  # stopped early
        kill -INT -- "-$images_pid" 2>/dev/null || true  # the builds' Ctrl-C: they clean up
        wait "$images_pid" 2>/dev/null || true
    fi
    echo "stage timings (seconds):"
    for line in "${stages[@]}"; do
        echo "  $line"
        if [[ $line == "images "* && -s $report/images.times ]]; then  # each image's own
            sed 's/^/    /' "$report/images.times"
        fi
    done
    echo "  total $((SECONDS - started))"
    local files=("$report"/*.xml)
    if [ -s "${files[0]}" ]; then  # the counts last, for whoever reads the last line
        python3 - "${files[@]}" <<'EOF'
import sys
import xml.etree.ElementTree as ET
# each run's junit file (unit, integration), summed
suites = []
for path in sys.argv[1:]:
    root = ET.parse(path).getroot()
    suites += [root] if root.tag == "testsuite" else root.findall("testsuite")
# where the time went, by test module (setup, call and teardown: a module's lab counts;
# a unit module's tests may have run in two processes at once): the 15 slowest unit
# modules, and every integration module (they are the run's time; a CI log shows it all)
modules: dict[str, float] = {}
for suite in suites:
    for case in suite.iter("testcase"):
        module = case.get("classname", "?")
        module = ".".join(p for p in module.split(".") if not p[:1].isupper())
        modules[module] = modules.get(module, 0.0) + float(case.get("time", 0) or 0)
ranked = sorted(modules.items(), key=lambda kv: -kv[1])
unit = [kv for kv in ranked if not kv[0].startswith("tests.integration.")][:15]
live = [kv for kv in ranked if kv[0].startswith("tests.integration.")]
for title, rows in (("slowest unit test modules", unit), ("integration test modules", live)):
    if rows:
        print(f"{title} (seconds):")
        for module, seconds in rows:
            print(f"  {seconds:7.1f}  {module}")
n = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
failed = n["failures"] + n["errors"]
print(f"tests: {n['tests'] - failed - n['skipped']} passed, {failed} failed, {n['skipped']} skipped")
EOF
    fi
    rm -rf "$report"
    exit "$rc"
}
trap print_timings EXIT

stage() {  # stage NAME COMMAND...: run it, remember how long it took
    local name=$1 t0=$SECONDS rc=0
    shift
    "$@" || rc=$?
    case $rc in
        0) stages+=("$name $((SECONDS - t0))") ;;
        5) stages+=("$name $((SECONDS - t0)) (no test selected)") ;;  # pytest's exit 5
        *) stages+=("$name $((SECONDS - t0)) (failed)") ;;
    esac
    return "$rc"
}

build_images() {  # the images (and Vagrant boxes) of the integration tests' labs
    local name t0
    # in the order the integration modules first boot them (alphabetical: test_capture,
    # test_docker_provider, test_lessons ... workloads/); a test that needs one still
    # being built waits on its lock, one not started yet it builds itself
    for name in trixie docker-host trixie-dev trixie-workloads; do
        t0=$(date +%s)
        .venv/bin/labctl image build "$name" >/dev/null || return
        echo "image $name: $(($(date +%s) - t0)) s"
    done
    for name in trixie trixie-dev; do
        t0=$(date +%s)
        .venv/bin/labctl image box "$name" >/dev/null || return
        echo "box $name: $(($(date +%s) - t0)) s"
    done
}

# On a fresh machine the images take minutes of downloads and dpkg, mostly waiting on the
# network and the disk: they are built in the background while lint, types and the unit
# tests (CPU-bound) and the first integration modules run. Their progress goes to a
# log, shown when a build fails; each image's seconds are printed at the end.
start_images() {
    images_started=$(date +%s)
    # a process group of its own (set -m): one signal reaches every build process, and a
    # background job without it would ignore SIGINT
    set -m
    (
        rc=0
        build_images >"$report/images.times" 2>"$report/images.log" || rc=$?
        echo "$rc" >"$report/images.rc"
        date +%s >"$report/images.end"
    ) &
    images_pid=$!
    set +m
}

finish_images() {  # wait for the images; the stage line says how long the run waited
    local waited=$SECONDS rc took
    wait "$images_pid" || true
    images_pid=""
    waited=$((SECONDS - waited))
    rc=$(cat "$report/images.rc" 2>/dev/null || echo 1)
    took=$(($(cat "$report/images.end" 2>/dev/null || date +%s) - images_started))
    cat "$report/images.times"
    if [ "$rc" -eq 0 ]; then
        stages+=("images $took (built beside the other stages; waited $waited at the end)")
    else
        stages+=("images $took (failed)")
        echo "the images stage failed; the end of its log:" >&2
        tail -n 40 "$report/images.log" >&2
    fi
    return "$rc"
}

# The arguments go to pytest. A path under tests/unit or tests/integration (a file, a
# directory, FILE::TEST) goes to that run; another existing path (tests, .) means both; every
# other argument (-x, -k EXPR...) goes to both runs. Without a path both runs run all their
# tests; with paths of one kind only, only that run runs.
unit=() integration=() common=()
for arg in "$@"; do
    path=${arg%%::*}
    path=${path#./}
    case "$path" in
        tests/unit|tests/unit/*) unit+=("$arg") ;;
        tests/integration|tests/integration/*) integration+=("$arg") ;;
        *) if [[ $arg != -* && -e $path ]]; then
               unit+=(tests/unit) integration+=(tests/integration)
           else
               common+=("$arg")
           fi ;;
    esac
done
if [ "${#unit[@]}" -eq 0 ] && [ "${#integration[@]}" -eq 0 ]; then
    unit=(tests/unit) integration=(tests/integration)
fi

stage setup ./scripts/setup.sh  # everything the tests need (demo.sh: --minimal)
# Every image the integration tests boot (each a no-op when cached): on a fresh machine
# this stage is the cold cache's cost, printed per image.
build_them=""
if [ "${#integration[@]}" -gt 0 ] && [ "$(id -u)" -eq 0 ]; then
    build_them=1
    start_images
fi
stage lint .venv/bin/ruff check labctl tests
stage typecheck .venv/bin/mypy labctl
# -rs: every skipped test says why (in CI, as root, a skipped integration test fails:
# tests/integration/conftest.py). A failed unit run does not stop the integration run; the
# script exits with the first failed run's status. Exit 5 (no test selected: -k matching
# tests of one run only) is a failure only when neither run selected a test.
pytest=(.venv/bin/python -m pytest -q -rs -p no:cacheprovider --durations=40)
codes=()
if [ "${#unit[@]}" -gt 0 ]; then
    rc=0
    stage unit "${pytest[@]}" -n "$workers" --junitxml="$report/unit.xml" \
        "${common[@]}" "${unit[@]}" || rc=$?
    codes+=("$rc")
fi
# The integration stage does not wait for every image: a lab's `up` that needs an image
# still being built waits on that build's lock, then boots it, so the builds of the images
# needed later overlap the first modules' labs.
if [ "${#integration[@]}" -gt 0 ]; then
    rc=0
    lanes=()
    if [ "$live_workers" -gt 1 ]; then
        lanes=(-n "$live_workers" --dist loadscope)  # the conftest groups and orders
    fi
    stage integration "${pytest[@]}" "${lanes[@]}" --junitxml="$report/integration.xml" \
        "${common[@]}" "${integration[@]}" || rc=$?
    codes+=("$rc")
fi
if [ -n "$build_them" ]; then
    rc=0
    finish_images || rc=$?
    codes+=("$rc")
fi
status=5
for rc in "${codes[@]}"; do
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then status=$rc; break; fi
    if [ "$rc" -eq 0 ]; then status=0; fi
done
exit "$status"
