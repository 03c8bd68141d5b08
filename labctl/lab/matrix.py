"""One scenario across kernels (`labctl matrix`): for each kernel in turn, the lab up on
it (lifecycle.up, as `labctl up --kernel K` does), each step run on the host with the
lab's name in LABCTL_LAB (so every `labctl` command in it finds the lab), then the lab
down (lifecycle.destroy), whatever happened. Every kernel is checked before the first lab
is made: a malformed kernel, a path that is no kernel or a Debian version the archive
lacks is refused (exit 2) with nothing booted.

Cells: the lab's `up`, then one per step; a step after a failed `up` is not run. A
step's command is an argv (never a shell line; `labctl` in it is this labctl), run to its
end or its timeout; its reason, when it fails, is its last line of output. The records
are plain data; the CLI makes the table (format_rows) and the JSON.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from labctl import hostproc
from labctl.capabilities import for_provider
from labctl.errors import LabctlError, UsageError, short_repr
from labctl.lab import lifecycle
from labctl.lab.labs import lab_made
from labctl.progress import Progress
from labctl.store.labdir import DEFAULT_LAB_ENV, check_lab_name
from labctl.topology.resolved import Lab

MAX_KERNELS = 16
MAX_STEPS = 32
STEP_SECONDS = 1800.0  # a step's default bound: a pytest file over a TCG lab
REASON_CHARS = 200
OUTPUT_BYTES = 1 << 20  # what of a step's output is kept to find its last line
PASSED, FAILED, NOT_RUN = "passed", "failed", "not run"


@dataclass
class Cell:
    """One kernel's result of one step (`up` is the first)."""

    step: str
    result: str  # passed, failed or not run
    seconds: float
    reason: str = ""  # a failed step's last line of output, or why it was not run


@dataclass
class KernelRow:
    kernel: str  # as given: image, debian:6.12, a path
    release: str  # what the nodes' `uname -r` said ("" when the lab never came up)
    lab: str
    cells: list[Cell] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(c.result == FAILED for c in self.cells)


@dataclass
class MatrixReport:
    """What `labctl matrix --json` prints."""

    topology: str
    steps: list[str]  # each step's command line, in order
    kernels: list[KernelRow]
    passed: bool  # no cell failed


def parse_kernels(text: str) -> list[str]:
    """`--kernels A,B,...`: each kernel once, syntax checked (exit 2)."""
    from labctl.topology.kernelsource import check_kernel
    from labctl.topology.workbench import WorkbenchValueError

    kernels = [k.strip() for k in text.split(",")]
    if not text.strip() or any(not k for k in kernels):
        raise UsageError(f"--kernels {short_repr(text)}: an empty kernel in the list",
                         hint="--kernels image,debian:6.12 (a comma between kernels)")
    if len(kernels) > MAX_KERNELS:
        raise UsageError(f"--kernels names {len(kernels)} kernels; at most {MAX_KERNELS}",
                         hint="split the matrix into several runs")
    doubles = sorted({k for k in kernels if kernels.count(k) > 1})
    if doubles:
        raise UsageError(f"--kernels names {', '.join(map(short_repr, doubles))} twice",
                         hint="name each kernel once")
    for kernel in kernels:
        try:
            check_kernel(kernel)
        except WorkbenchValueError as exc:
            raise UsageError(f"--kernels: {exc.message}", hint=exc.hint) from None
    return kernels


def parse_steps(steps: Sequence[str], command: Sequence[str]) -> list[list[str]]:
    """`--step 'CMD ARGS'` (each split as a shell would, never run by one) and the command
    after `--`, in that order; at least one (exit 2)."""
    argvs = []
    for step in steps:
        try:
            argv = shlex.split(step)
        except ValueError as exc:
            raise UsageError(f"--step {short_repr(step)}: {exc}",
                             hint="quote the step as one argument: --step 'labctl run "
                             "pingpong'") from None
        if not argv:
            raise UsageError("--step '' is an empty command",
                             hint="--step 'labctl run pingpong'")
        argvs.append(argv)
    if command:
        argvs.append(list(command))
    if not argvs:
        raise UsageError("no step to run in each lab",
                         hint="labctl matrix --kernels image,debian:6.12 TOPOLOGY -- "
                         "labctl run pingpong")
    if len(argvs) > MAX_STEPS:
        raise UsageError(f"{len(argvs)} steps; at most {MAX_STEPS}",
                         hint="put the steps in a script and run it as one step")
    return argvs


def lab_name(base: str, name: str | None) -> str:
    """The matrix's lab: --name, else the topology's name with -matrix (not the lab a
    plain `up` of the topology makes, which may be up beside it)."""
    return check_lab_name(name if name is not None else f"{base}-matrix"[:40])


def run_matrix(topology: Path, kernels: list[str], steps: list[list[str]],
               options: lifecycle.UpOptions, progress: Progress,
               step_seconds: float = STEP_SECONDS,
               run_step: Callable[[list[str], dict[str, str], float], tuple[bool, str]]
               | None = None) -> MatrixReport:
    """Every kernel's lab, one at a time: up, the steps, down."""
    run_step = run_step or _run_step
    # every kernel resolved first: bad input (exit 2) before any lab is made, and each
    # debian: kernel fetched once here
    resolved = []
    for kernel in kernels:
        progress(f"kernel {kernel}: checking")
        resolved.append(lifecycle.resolve(topology, dataclasses.replace(options, kernel=kernel),
                                          progress))
    for lab in resolved:  # each kernel against its provider and what the nodes need
        lifecycle.check_own_kernels(lab, for_provider(lab.provider))
    name = resolved[0].name
    if lab_made(name):
        raise UsageError(f"lab {name} exists: the matrix makes and removes its own lab",
                         hint=f"`labctl down --lab {name}`, or give the matrix --name NAME")
    rows = []
    for kernel, lab in zip(kernels, resolved, strict=True):
        rows.append(_one_kernel(topology, kernel, lab, steps, options, progress,
                                step_seconds, run_step))
    return MatrixReport(str(topology), [shlex.join(s) for s in steps], rows,
                        not any(r.failed for r in rows))


def _one_kernel(topology: Path, kernel: str, lab: Lab, steps: list[list[str]],
                options: lifecycle.UpOptions, progress: Progress, step_seconds: float,
                run_step: Callable[[list[str], dict[str, str], float], tuple[bool, str]]
                ) -> KernelRow:
    row = KernelRow(kernel, "", lab.name)
    started = time.monotonic()
    try:
        progress(f"kernel {kernel}: up")
        try:
            up = lifecycle.up(topology, dataclasses.replace(options, kernel=kernel),
                              lambda m: progress(f"kernel {kernel}: {m}"), resolved=lab)
        except LabctlError as exc:
            row.cells.append(Cell("up", FAILED, _since(started), _reason(exc.message)))
            row.cells += [Cell(shlex.join(s), NOT_RUN, 0.0, "the lab did not come up")
                          for s in steps]
            return row
        row.cells.append(Cell("up", PASSED, round(up.seconds, 1)))
        row.release = _releases(up.lab.name)
        env = step_env(lab.name)
        for step in steps:
            progress(f"kernel {kernel}: {shlex.join(step)[:60]}")
            began = time.monotonic()
            ok, reason = run_step(step, env, step_seconds)
            row.cells.append(Cell(shlex.join(step), PASSED if ok else FAILED, _since(began),
                                  "" if ok else reason))
    finally:
        progress(f"kernel {kernel}: down")
        lifecycle.destroy(lab.name)
    return row


def _since(started: float) -> float:
    return round(time.monotonic() - started, 1)


def _reason(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return last[:REASON_CHARS] + ("…" if len(last) > REASON_CHARS else "")


def _releases(name: str) -> str:
    """The kernels the lab's nodes run (`uname -r`), as status has them."""
    from labctl.lab.handle import LabHandle
    from labctl.lab.status import collect_status
    from labctl.store.labdir import LabDir

    record = collect_status(LabHandle(LabDir(name)), live=True)
    releases = sorted({release for n in record["nodes"]
                       if (release := n["kernel"]["release"])})
    return ", ".join(releases)


def step_env(lab: str) -> dict[str, str]:
    """A step's environment: LABCTL_LAB names the matrix's lab, and the folder of the
    Python running labctl comes first on PATH, so that `labctl` inside a step's shell
    (`sh -c 'labctl ...'`) is this labctl too when it was installed in a virtualenv."""
    path = os.environ.get("PATH", os.defpath)
    return {**os.environ, DEFAULT_LAB_ENV: lab,
            "PATH": os.pathsep.join([os.path.dirname(sys.executable), path])}


def step_argv(argv: list[str]) -> list[str]:
    """A step as it runs: `labctl` is this labctl (the one running the matrix, installed
    on PATH or not)."""
    return [sys.executable, "-m", "labctl", *argv[1:]] if argv[0] == "labctl" else argv


def _run_step(argv: list[str], env: dict[str, str], seconds: float) -> tuple[bool, str]:
    """Run one step to its end (or `seconds`): passed, or the reason it failed."""
    try:
        result = hostproc.run(step_argv(argv), timeout=seconds, check=False, env=env,
                              limit=OUTPUT_BYTES, what=shlex.join(argv)[:80])
    except hostproc.HostProcessError as exc:  # not installed, or past its time
        return False, _reason(exc.message)
    if result.returncode == 0:
        return True, ""
    reason = _reason(result.stderr) or _reason(result.stdout)
    return False, f"exit {result.returncode}" + (f": {reason}" if reason else "")


def format_rows(report: MatrixReport) -> tuple[list[str], list[list[str]]]:
    """The table as text: a header (kernel, up, each step) and a row per kernel, each
    cell `passed`, `failed: REASON` or `not run`."""
    header = ["kernel", "up", *report.steps]
    rows = []
    for row in report.kernels:
        name = row.kernel + (f" ({row.release})" if row.release else "")
        cells = [name]
        for cell in row.cells:
            if cell.result == PASSED:
                cells.append(f"passed ({cell.seconds:.0f} s)")
            elif cell.result == FAILED:
                cells.append(f"failed: {cell.reason}" if cell.reason else "failed")
            else:
                cells.append(NOT_RUN)
        rows.append(cells)
    return header, rows
