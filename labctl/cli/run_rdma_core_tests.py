"""`labctl run rdma-core-tests`: rdma-core's own pyverbs test suite in lab nodes, one run
per module, each module's results against the known failures (labctl.runners.rdma_core_tests)."""

from __future__ import annotations

from collections import Counter

import typer
from rich.markup import escape
from rich.table import Table

from labctl.cli import complete
from labctl.cli.common import LabOption, console, err_console, seconds
from labctl.cli.report import on_interrupt
from labctl.cli.safeprint import print_json
from labctl.data.rdma_core_suite import GENERIC_MODULES
from labctl.errors import UsageError, short_repr
from labctl.lab.handle import open_lab
from labctl.runners.rdma_core_tests import (
    DEFAULT_TIMEOUT,
    ModuleRun,
    SuiteReport,
    check_available,
    check_modules,
    run_suite,
    suite_target,
)
from labctl.topology.lookup import require_node
from labctl.topology.resolved import Lab

COMMAND = "rdma-core-tests"
_MODULE_WORDS = tuple(name.removeprefix("test_") for name in GENERIC_MODULES)
_GENERIC = ", ".join(_MODULE_WORDS)
_COLORS = {"passed": "green", "failed": "red", "crashed": "red", "timeout": "red",
           "no-result": "red"}


def _nodes(text: str | None, lab: Lab, rdma_nodes: list[str]) -> list[str]:
    """--node: "a" or "a,b"; without it the first node with an RDMA device."""
    if text is None:
        if not rdma_nodes:
            raise UsageError("the lab has no node with an RDMA device",
                             hint="rdma-core's tests need an rxe or siw device")
        return rdma_nodes[:1]
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise UsageError(f"--node {short_repr(text)}: no node named",
                         hint=f"nodes: {', '.join(n.name for n in lab.nodes)}")
    for name in names:
        require_node(lab, name, flag="--node")
    return names


def _result_text(run: ModuleRun) -> str:
    text = f"[{_COLORS.get(run.status, 'red')}]{run.status}[/]"
    if run.signal:
        text += f" ({run.signal})"
    if run.known and not run.new_failures:
        text += " [yellow]known[/]"
    if run.attempts > 1:  # say it: a pass that needed a second run is not a clean pass
        text += f" [yellow](attempt {run.attempts})[/]"
    return text


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def print_report(report: SuiteReport) -> None:
    table = Table(title="rdma-core tests (" + ", ".join(
        f"{node}: {version}" for node, version in report.rdma_core.items()) + ")")
    for column in ("node", "module", "result", "ran", "passed", "failed", "errors",
                   "skipped", "seconds"):
        table.add_column(column, justify="right" if column in (
            "ran", "passed", "failed", "errors", "skipped", "seconds") else "left")
    for run in report.modules:
        table.add_row(run.node, run.module.removeprefix("test_"), _result_text(run),
                      _count(run.ran), str(run.passed), str(run.failed), str(run.errored),
                      str(run.skipped), f"{run.seconds:.0f}")
    console.print(table)
    for node in report.rdma_core:
        mine = [r for r in report.modules if r.node == node]
        reasons: Counter[str] = Counter()
        for run in mine:
            reasons.update(run.skip_reasons)
        ran = sum(r.ran or 0 for r in mine)
        console.print(f"{node} ({mine[0].device} {mine[0].device_kind}): {ran} ran, "
                      f"{sum(r.passed for r in mine)} passed, "
                      f"{sum(r.failed + r.errored for r in mine)} failed or errored, "
                      f"{sum(r.skipped for r in mine)} skipped" if mine else node)
        for reason, count in reasons.most_common(8):
            console.print(f"  skipped {count:>3}: {escape(reason)}", soft_wrap=True)
        if len(reasons) > 8:
            console.print(f"  ({len(reasons) - 8} more skip reasons: see --json)")
    for run in report.modules:
        for note in run.known:
            what = f"{run.module}.{note.test}" if note.test else run.module
            console.print(f"[yellow]known failure[/] {run.node}: {what} {note.outcome}: "
                          f"{escape(note.reason)}", soft_wrap=True)
    for run in report.modules:
        for retry in run.retried:
            console.print(f"[yellow]retried[/] {run.node}: {escape(retry)}", soft_wrap=True)
    for passing in report.now_passing:
        console.print(f"[yellow]{escape(passing)}[/]", soft_wrap=True)
    for run in report.modules:
        for failure in run.new_failures:
            err_console.print(f"[bold red]new failure[/] {run.node}: {escape(failure)}",
                              soft_wrap=True)
        if run.new_failures and run.output_tail:
            err_console.print(run.output_tail, markup=False, soft_wrap=True)
    console.print(f"{len(report.modules)} module runs in {report.seconds:.0f} s: "
                  f"{report.new_failures} new failures, {report.known_failures} known")


def _progress(run: ModuleRun) -> None:
    err_console.print(f"{run.node} {run.module}: {run.status}"
                      + (f" ({run.signal})" if run.signal else "")
                      + f", {_count(run.ran)} ran, {run.skipped} skipped in {run.seconds} s")


def rdma_core_tests(
    node: str = typer.Option(None, "--node", help="Node(s) to run the suite in, A or A,B "
                             "(at once; default: the first node with an RDMA device).",
                             metavar="NODE,...", autocompletion=complete.node_names),
    modules: str = typer.Option(None, "--modules", help="Test modules, e.g. cq,qp "
                                f"(default: the generic ones: {_GENERIC}).", metavar="MODULE,...",
                                autocompletion=complete.comma_choices(*_MODULE_WORDS)),
    timeout: float = typer.Option(DEFAULT_TIMEOUT, "--timeout", metavar="SECONDS",
                                  help="Seconds each module may run.",
                                  callback=seconds("timeout")),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    lab: str = LabOption,
) -> None:
    """rdma-core's own pyverbs tests (its version's tests/ from Debian's source) in a node
    against its rxe or siw device, one run per module; exit 1 on a failure the known-failure
    table does not name."""
    chosen = check_modules(modules)  # bad names: exit 2 before the lab is opened
    handle = open_lab(lab)
    on_interrupt(f"lab {handle.lab.name} is untouched, do not `labctl down` it: a test "
                 f"module still running in a node ends within --timeout ({timeout:g} s)")
    rdma_nodes = [n.name for n in handle.lab.nodes if n.rdma_interface is not None]
    targets = [suite_target(handle, n) for n in _nodes(node, handle.lab, rdma_nodes)]
    check_available(targets, chosen)
    report = run_suite(handle, targets, chosen, timeout,
                       progress=None if as_json else _progress)
    if as_json:
        print_json(report.to_dict())
    else:
        print_report(report)
    if report.status != "passed":
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command(COMMAND)(rdma_core_tests)
