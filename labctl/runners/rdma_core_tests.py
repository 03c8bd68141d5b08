"""rdma-core's own pyverbs test suite run in lab nodes against their rxe or siw device, one
unittest run per module (`python3 tests/run_tests.py --dev DEV -v MODULE`), each read back
test by test and held against the known failures (labctl/data/rdma_core_suite.py).

One run per module because the suite run whole segfaults in an mlx5 module on other
devices, and because a module that crashes then costs only its own results. A module's run
ends as passed, failed (a test failed or errored), crashed (a signal ended python; the tests
it printed are still read), timeout, or no-result (python ended without unittest's summary,
e.g. an import error, or the node never said how python ended).
"""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from labctl.data.rdma_core_suite import (
    GENERIC_MODULES,
    KNOWN_FAILURES,
    TESTS_DIR,
    known_failure,
    known_race,
)
from labctl.errors import LabctlError, UsageError, short_repr
from labctl.lab.handle import LabHandle
from labctl.runners.unittest_output import TestResult, parse_unittest
from labctl.topology.lookup import require_node

ModuleStatus = Literal["passed", "failed", "crashed", "timeout", "no-result"]
DEFAULT_TIMEOUT = 600.0  # seconds per module; the slowest generic module takes ~1 min on TCG
# The node ends python itself at the timeout (timeout(1), exit 124); the host waits this much
# longer for the node's answer before it gives up on the node.
HOST_MARGIN = 60.0
LISTING_SECONDS = 60.0
# A module that failed only by known races (labctl.data.rdma_core_suite.KNOWN_RACES) is run
# again, at most this often in all; the record says how many attempts it took and why.
MAX_ATTEMPTS = 2
EXIT_MARKER = "labctl-exit="
MAX_TAIL_LINES = 30
_MODULE_NAME = re.compile(r"^test_[a-z0-9_]{1,60}$")
# The suite's directory in the node; run_tests.py imports the `tests` package from there.
_RUN_SCRIPT = (
    'cd "$1" || exit 3; timeout --kill-after=10 "$2" python3 -u tests/run_tests.py '
    '--dev "$3" -v "$4" 2>&1; echo "' + EXIT_MARKER + '$?"'
)
_LIST_SCRIPT = 'cat "$1/VERSION" && cd "$1/tests" && ls'


@dataclass
class KnownNote:
    """A failure the known-failure table names, seen in this run (or no longer seen)."""

    test: str  # "" for the module's run as a whole (a crash)
    outcome: str
    reason: str


@dataclass
class ModuleRun:
    """One module of the suite run in one node: `labctl run rdma-core-tests --json` lists
    these (docs/json)."""

    node: str
    device: str
    device_kind: str  # rxe | siw
    module: str
    status: ModuleStatus
    exit_code: int | None  # python's exit status; None when the node did not say
    signal: str  # "SIGSEGV" when a signal ended python, else ""
    ran: int | None  # unittest's "Ran N tests"; None: its summary never came
    passed: int
    failed: int
    errored: int
    skipped: int
    seconds: float
    skip_reasons: dict[str, int] = field(default_factory=dict)
    tests: list[TestResult] = field(default_factory=list)  # every test unittest reported
    known: list[KnownNote] = field(default_factory=list)  # known failures seen
    new_failures: list[str] = field(default_factory=list)  # failures the table does not know
    output_tail: str = ""  # the run's last lines when it did not pass
    attempts: int = 1  # > 1: an earlier run failed by a known race only
    retried: list[str] = field(default_factory=list)  # why each earlier run did not count

    @property
    def ok(self) -> bool:
        """Nothing here that the known-failure table does not explain."""
        return not self.new_failures


@dataclass
class SuiteReport:
    """The whole `labctl run rdma-core-tests` run."""

    rdma_core: dict[str, str]  # node -> the version its tests came from
    modules: list[ModuleRun]
    status: Literal["passed", "failed"]  # failed: a module had a failure not known
    new_failures: int
    known_failures: int
    # Known failures of the table that did not happen where their module ran on their device
    # kind: "test_x (rxe): reason" (the table wants updating).
    now_passing: list[str]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_modules(text: str | None) -> list[str]:
    """--modules: "cq,qp" or "test_cq,test_qp" -> ["test_cq", "test_qp"]; None: the generic
    modules. UsageError (exit 2) for a name that cannot be a test module's."""
    if text is None:
        return list(GENERIC_MODULES)
    names = []
    for raw in text.split(","):
        raw = raw.strip()
        name = raw if raw.startswith("test_") else f"test_{raw}"
        if not _MODULE_NAME.match(name):
            raise UsageError(f"--modules: {short_repr(raw)} is not a test module's name",
                             hint=f"e.g. --modules cq,qp (generic ones: "
                             f"{', '.join(m.removeprefix('test_') for m in GENERIC_MODULES)})")
        if name not in names:
            names.append(name)
    return names


def signal_name(exit_code: int) -> str:
    """The signal a shell's exit status 128+N names ("SIGSEGV"), "" when it names none."""
    if 128 < exit_code < 128 + 65:
        try:
            return signal.Signals(exit_code - 128).name
        except ValueError:
            return f"signal {exit_code - 128}"
    return ""


def _exit_code(output: str) -> tuple[str, int | None]:
    """The run's output without the marker line the script appends, and the exit status
    the marker gives (None when it is missing: the node did not finish the script)."""
    body, sep, tail = output.rpartition(EXIT_MARKER)
    value = tail.strip()
    if not sep or not value.isdigit() or len(value) > 3:
        return output, None
    return body, int(value)


def read_module_run(node: str, device: str, kind: str, module: str, output: str,
                    seconds: float) -> ModuleRun:
    """One module's run from what the node printed (its output, then the exit marker)."""
    body, code = _exit_code(output)
    parsed = parse_unittest(body)
    sig = signal_name(code) if code is not None else ""
    status: ModuleStatus
    if code == 124:
        status = "timeout"
    elif sig:
        status = "crashed"
    elif parsed.ran is None or code is None:
        status = "no-result"
    elif code == 0 and parsed.verdict == "OK" and not parsed.count("failed") \
            and not parsed.count("errored"):
        status = "passed"
    else:
        status = "failed"
    skipped = [t for t in parsed.tests if t.status == "skipped"]
    run = ModuleRun(
        node=node, device=device, device_kind=kind, module=module, status=status,
        exit_code=code, signal=sig, ran=parsed.ran, passed=parsed.count("passed"),
        failed=parsed.count("failed"), errored=parsed.count("errored"),
        skipped=len(skipped), seconds=round(seconds, 1),
        skip_reasons=dict(Counter(t.reason or "(no reason given)" for t in skipped)
                          .most_common()),
        tests=parsed.tests)
    _hold_against_known(run)
    if status != "passed":
        run.output_tail = "\n".join(body.rstrip().splitlines()[-MAX_TAIL_LINES:])
    return run


def _hold_against_known(run: ModuleRun) -> None:
    """Sort the run's failures into known (the table names them) and new."""
    outcomes: list[tuple[str, str, str]] = [
        (t.test, t.status, t.reason) for t in run.tests if t.status in ("failed", "errored")]
    if run.status == "crashed":
        outcomes.append(("", "crashed", f"ended by {run.signal}"))
    elif run.status == "timeout":
        outcomes.append(("", "timeout", "ran into its timeout"))
    elif run.status == "no-result":
        outcomes.append(("", "no-result", "no unittest summary" if run.ran is None
                         else "the node did not report python's exit status"))
    elif run.status == "failed" and not any(o[1] in ("failed", "errored") for o in outcomes):
        outcomes.append(("", "failed", f"python exited {run.exit_code} after its "
                         f"{run.ran} tests"))
    for test, outcome, detail in outcomes:
        known = known_failure(run.module, test, run.device_kind, outcome)
        if known is not None:
            run.known.append(KnownNote(test, outcome, known.reason))
        else:
            what = f"{run.module}.{test}" if test else run.module
            run.new_failures.append(f"{what} {outcome}: {detail}" if detail
                                    else f"{what} {outcome}")


def now_passing(runs: list[ModuleRun]) -> list[str]:
    """Known failures that did not happen in a run of their module on their device kind."""
    notes = []
    for entry in KNOWN_FAILURES:
        for run in runs:
            if run.module != entry.module or run.device_kind not in entry.devices:
                continue
            seen = any((k.test, k.outcome) == (entry.test, entry.outcome) for k in run.known)
            ran_test = entry.test == "" or any(t.test == entry.test and t.status != "skipped"
                                              for t in run.tests)
            if not seen and ran_test and run.status != "timeout":
                what = f"{entry.module}.{entry.test}" if entry.test else entry.module
                notes.append(f"{what} on {run.node} ({run.device_kind}): known failure now "
                             f"passes ({entry.outcome}: {entry.reason})")
    return notes


@dataclass(frozen=True)
class SuiteTarget:
    """A node the suite runs in: its device and the rdma-core version of its tests."""

    node: str
    device: str
    kind: str
    version: str
    available: frozenset[str]  # the test modules its image holds


def suite_target(handle: LabHandle, node: str) -> SuiteTarget:
    """`node` checked for an RDMA device and the suite in its image (UsageError: exit 2)."""
    lab_node = require_node(handle.lab, node)
    if lab_node.rdma_interface is None:
        raise UsageError(f"node {node} has no RDMA device (rdma: {lab_node.rdma})",
                         hint="choose a node with an rxe or siw device (--node)")
    device = handle.rdma_device(node)
    listing = handle.run(node, ["sh", "-c", _LIST_SCRIPT, "sh", TESTS_DIR],
                         timeout=LISTING_SECONDS)
    lines = listing.stdout.splitlines()
    if listing.returncode != 0 or not lines:
        raise UsageError(
            f"node {node}'s image ({lab_node.image}) has no rdma-core tests in {TESTS_DIR}",
            hint="give the node `image: trixie-workloads`, whose build unpacks them")
    modules = frozenset(line[:-3] for line in lines[1:]
                        if line.endswith(".py") and _MODULE_NAME.match(line[:-3]))
    return SuiteTarget(node, device, str(lab_node.rdma), lines[0].strip()[:60], modules)


def check_available(targets: list[SuiteTarget], modules: list[str]) -> None:
    """UsageError (exit 2) when a node's suite lacks a module asked for."""
    for target in targets:
        missing = [m for m in modules if m not in target.available]
        if missing:
            raise UsageError(
                f"rdma-core {target.version}'s tests in {target.node} have no module "
                f"{', '.join(missing)}",
                hint=f"modules there: {', '.join(sorted(target.available))}")


def run_module(handle: LabHandle, target: SuiteTarget, module: str,
               timeout: float) -> ModuleRun:
    """One module of the suite in one node, each run bounded by `timeout` seconds; run
    again when it failed by known races only (race_reasons)."""
    retried: list[str] = []
    for attempt in range(1, MAX_ATTEMPTS + 1):
        run = _run_once(handle, target, module, timeout)
        races = race_reasons(run)
        if not races or attempt == MAX_ATTEMPTS:
            run.attempts, run.retried = attempt, retried
            return run
        retried.extend(f"attempt {attempt}: {race}" for race in races)
    raise AssertionError("unreachable: the last attempt returns")


def race_reasons(run: ModuleRun) -> list[str]:
    """Why each failed test of `run` failed by a known race; [] when a failure is not one
    (or nothing failed): only a run whose every new failure is a known race is retried."""
    if run.status != "failed" or not run.new_failures:
        return []
    failed = [t for t in run.tests if t.status in ("failed", "errored")]
    races = [(t, known_race(t.reason)) for t in failed]
    if len(failed) != len(run.new_failures) or any(r is None for _, r in races):
        return []
    return [f"{run.module}.{t.test} {t.status}: {t.reason} (known race: {r.reason})"
            for t, r in races if r is not None]


def _run_once(handle: LabHandle, target: SuiteTarget, module: str,
              timeout: float) -> ModuleRun:
    started = time.monotonic()
    result = handle.run(target.node, ["sh", "-c", _RUN_SCRIPT, "sh", TESTS_DIR,
                                      f"{timeout:g}", target.device, module],
                        timeout=timeout + HOST_MARGIN)
    seconds = time.monotonic() - started
    run = read_module_run(target.node, target.device, target.kind, module, result.stdout,
                          seconds)
    if run.exit_code is None and result.returncode != 0:
        # The node never reached the marker: say what the exec said (its last line).
        lines = result.stderr.strip().splitlines()
        run.output_tail = "\n".join([*run.output_tail.splitlines(),
                                     *(lines[-3:] or [f"exit {result.returncode}"])])
    return run


Progress = Callable[[ModuleRun], None]


def run_suite(handle: LabHandle, targets: list[SuiteTarget], modules: list[str],
              timeout: float, progress: Progress | None = None) -> SuiteReport:
    """Every module in every target node: nodes at once, a node's modules one by one."""
    if not targets:
        raise LabctlError("no node to run rdma-core's tests in")
    started = time.monotonic()

    def node_runs(target: SuiteTarget) -> list[ModuleRun]:
        runs = []
        for module in modules:
            run = run_module(handle, target, module, timeout)
            if progress is not None:
                progress(run)
            runs.append(run)
        return runs

    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        runs = [run for node in pool.map(node_runs, targets) for run in node]
    passing = now_passing(runs)
    new = sum(len(r.new_failures) for r in runs)
    return SuiteReport(
        rdma_core={t.node: t.version for t in targets}, modules=runs,
        status="failed" if new else "passed", new_failures=new,
        known_failures=sum(len(r.known) for r in runs), now_passing=passing,
        seconds=round(time.monotonic() - started, 1))
