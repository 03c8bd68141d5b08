"""`labctl run ucx`, `run ucx-info` and `run mpi`: real RDMA software across the lab
(docs/workloads.md). Registered into `labctl run` after labctl.cli.run."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from labctl.capture.runhook import capture_line, captured_runner, capturing_run
from labctl.cli.common import console, err_console
from labctl.cli.run import (
    _progress,
    add_command,
    print_outputs,
    print_records,
    refuse,
    run_app,
    run_request,
)
from labctl.cli.safeprint import print_json
from labctl.errors import UsageError
from labctl.lab.handle import open_lab
from labctl.runners.execute import RunResult, failure_details
from labctl.runners.mpi import (
    MpiReport,
    MpiRun,
    check_mpi_options,
    choose_nodes,
    parse_transports,
    run_mpi,
)
from labctl.runners.options import MPI_COMMAND, UCX_COMMAND, UCX_INFO_COMMAND, RunCommand
from labctl.runners.schedule import run_pairs
from labctl.runners.ucx import TESTS, TRANSPORTS, UcxInfo, ucx_info, ucx_specs


def _both(value: str, every: tuple[str, ...], flag: str) -> tuple[str, ...]:
    if value == "both":
        return every
    if value not in every:
        raise UsageError(f"{flag} must be {', '.join(every)} or both (got {value!r})",
                         hint=f"e.g. {flag} both")
    return (value,)


# --- labctl run ucx ---------------------------------------------------------------------------
def _ucx_tls(result: RunResult) -> str:
    """The UCX_TLS the run used, from its argv."""
    for arg in result.client_argv:
        if arg.startswith("UCX_TLS="):
            return arg.removeprefix("UCX_TLS=")
    return ""


def _ucx_table(results: list[RunResult]) -> None:
    table = Table(title="ucx_perftest: RDMA vs TCP")
    for column in ("test", "transport", "UCX_TLS", "server", "client", "result",
                   "usec (median/avg)", "MB/s", "msg/s", "messages took"):
        table.add_column(column)
    for r in results:
        f = r.figures
        test, _, transport = r.variant.partition("-")
        timing = (f"{f['usec_percentile']:g} / {f['usec_average']:g}"
                  if test == "tag_lat" and f else f"{f['usec_average']:g} overhead" if f else "")
        table.add_row(test, transport, _ucx_tls(r), r.server, r.client, _status(r),
                      timing, f"{f['mb_per_sec_overall']:g}" if f else "",
                      f"{f['msg_per_sec_overall']:g}" if f else "",
                      ", ".join(f.get("lanes", [])))
    console.print(table)


def _status(r: RunResult) -> str:
    color = {"passed": "green", "skipped": "yellow"}.get(r.status, "red")
    return f"[{color}]{r.status}[/]" + (f" ({escape(r.reason)})" if r.reason else "")


def _run_ucx(command: RunCommand, values: dict[str, Any]) -> None:
    """ucx_perftest's tests over each transport between the pair(s), one table."""
    tests = _both(values["test"], TESTS, "--test")
    transports = _both(values["transport"], TRANSPORTS, "--transport")
    request = run_request(command, values)
    handle, chosen = request.open()
    as_json = request.as_json
    run = captured_runner(request.capture, request.capture_dir,
                          pair_in_name=len(chosen) > 1)

    def pair(index: int, server: str, client: str) -> list[RunResult]:
        results: list[RunResult] = []
        for spec in ucx_specs(tests, transports):
            result = run(handle, spec, server, client, request.options)
            results.append(result)
            if not as_json:
                _progress(result)
            if result.status == "skipped":  # siw, or no path: the pair runs nothing else
                break
        return results

    results = [r for rs in run_pairs(chosen, request.choice.jobs, pair) for r in rs]
    if as_json:
        print_records(results)
    else:
        _ucx_table(results)
        for r in results:
            if r.capture:
                console.print(capture_line(r), markup=False, soft_wrap=True)
        if request.show_output:
            print_outputs(results)
    for r in results:
        if r.status == "failed":
            err_console.print(f"[bold red]{r.label} failed[/]: {escape(r.reason)}")
            err_console.print(failure_details(r), markup=False, soft_wrap=True)
    skipped = [r for r in results if r.status == "skipped"]
    if skipped:
        refuse("ucx: " + "; ".join(
            dict.fromkeys(f"{r.server}-{r.client}: {r.reason}" for r in skipped)))
    if any(r.status == "failed" for r in results):
        raise typer.Exit(1)


# --- labctl run ucx-info ----------------------------------------------------------------------
def _run_ucx_info(command: RunCommand, values: dict[str, Any]) -> None:
    """`ucx_info -d` in each node, summarised."""
    handle = open_lab(values["lab"])
    names = ([n.strip() for n in values["nodes"].split(",") if n.strip()] if values["nodes"]
             else [n.name for n in handle.lab.nodes if n.rdma_interface is not None])
    nodes = choose_nodes(handle, ",".join(names)) if values["nodes"] else [
        handle.lab.node(n) for n in names]
    if not nodes:
        raise UsageError(f"lab {handle.lab.name} has no node with an RDMA device",
                         hint="give nodes rdma: rxe or siw in the topology")
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        infos = list(pool.map(lambda n: ucx_info(handle, n.name, handle.rdma_device(n.name),
                                                 n.rdma), nodes))
    if values["as_json"]:
        print_json({"nodes": [info.__dict__ for info in infos]})
    else:
        _ucx_info_table(infos)
    failed = [i for i in infos if i.status != "ok"]
    for info in failed:
        err_console.print(f"[bold red]{info.node}[/]: {escape(info.reason)}")
    if failed:
        raise typer.Exit(1)


def _ucx_info_table(infos: list[UcxInfo]) -> None:
    table = Table(title="UCX transports (ucx_info -d)")
    for column in ("node", "device", "UCX on the RDMA device", "other transports",
                   "UCX says"):
        table.add_column(column)
    for i in infos:
        others = [t for t in i.transports if t not in i.rdma_transports]
        table.add_row(i.node, f"{i.device} ({i.device_type})",
                      ", ".join(i.rdma_transports) or "[yellow]none[/]",
                      escape(", ".join(others)), escape("; ".join(i.ucx_says)))
    console.print(table)


# --- labctl run mpi ---------------------------------------------------------------------------
def _mpi_table(report: MpiReport) -> None:
    table = Table(title=f"Open MPI across {', '.join(report.nodes)} (mpirun in "
                        f"{report.launcher})")
    for column in ("transport", "mpirun options", "result", "pingpong usec (smallest)",
                   "pingpong MB/s (largest)", "allreduce usec (mean)", "allreduce sum"):
        table.add_column(column)
    for run in report.runs:
        f = run.figures
        reduce = f.get("allreduce", {})
        table.add_row(run.transport, escape(_mca_text(run.mca)), _mpi_status(run),
                      str(f.get("pingpong_usec", "")),
                      str(f.get("pingpong_mb_per_sec", "")),
                      str(reduce.get("usec_mean", "")),
                      (f"{reduce['sum']} (expected {reduce['expected']})" if reduce else ""))
    console.print(table)


def _mca_text(mca: list[str]) -> str:
    """mpirun's transport options, short: "pml ucx, btl self, UCX_TLS=..." (--json has all)."""
    parts, words = [], iter(mca)
    for word in words:
        if word == "--mca":
            parts.append(f"{next(words, '')} {next(words, '')}")
        elif word == "-x":
            value = next(words, "")
            if value.startswith("UCX_TLS="):
                parts.append(value)
    return ", ".join(parts)


def _mpi_status(run: MpiRun) -> str:
    color = "green" if run.status == "passed" else "red"
    notes = [n for n in (run.reason, run.leftover and f"cleaned up: {run.leftover}") if n]
    return f"[{color}]{run.status}[/]" + (f" ({escape('; '.join(notes))})" if notes else "")


def _run_mpi(command: RunCommand, values: dict[str, Any]) -> None:
    """Open MPI across the nodes over each transport, one table."""
    transports = parse_transports(values["transport"])
    iters, size, seconds = check_mpi_options(values["mpi_iters"], values["max_size"],
                                             values["timeout"])
    handle = open_lab(values["lab"])
    nodes = choose_nodes(handle, values["nodes"])
    as_json = values["as_json"]

    def progress(run: MpiRun) -> None:
        if not as_json:
            err_console.print(f"mpi {run.transport} across {len(nodes)} nodes: {run.status}"
                              + (f" ({escape(run.reason)})" if run.reason else "")
                              + f" in {run.seconds} s")

    with capturing_run(handle, nodes[0].name, "mpi", values["capture"],
                       values["capture_dir"], nodes[1].name) as cap:
        report = run_mpi(handle, nodes, transports, iters, size, seconds, progress)
    if cap is not None:
        report.capture = cap.record()
    if as_json:
        print_json(report.to_dict())
    else:
        _mpi_table(report)
        if report.capture:
            console.print(f"capture mpi: {report.capture['pcap']} "
                          f"({report.capture['packets']} packets)", markup=False)
        for run in report.runs if values["show_output"] else []:
            if run.status == "passed":  # a failed one's output is printed below
                console.print(f"=== mpi {run.transport}: {run.status}\n--- {report.launcher}: "
                              f"{' '.join(run.argv)}\n{run.output.rstrip()}",
                              markup=False, soft_wrap=True)
    failed = [r for r in report.runs if r.status != "passed"]
    for run in failed:
        err_console.print(f"[bold red]mpi {run.transport} failed[/]: {escape(run.reason)}")
        err_console.print(f"--- {report.launcher}: {' '.join(run.argv)}\n{run.output[-4000:]}",
                          markup=False, soft_wrap=True)
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """The workload commands join `labctl run` (registered by labctl.cli.run)."""
    add_command(run_app, UCX_COMMAND, _run_ucx)
    add_command(run_app, UCX_INFO_COMMAND, _run_ucx_info, pair=False, capture=False,
                output=False)
    add_command(run_app, MPI_COMMAND, _run_mpi, pair=False)

