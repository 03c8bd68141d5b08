"""`labctl bench`: C vs Python RC pingpong vs TCP ping-pong between two nodes."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from labctl.cli.common import LabOption, console, err_console, int_range
from labctl.cli.run import ClientOption, ServerOption, TimeoutOption, pick_nodes
from labctl.errors import UsageError
from labctl.lab.handle import open_lab
from labctl.runners.bench import BenchReport, plot, run_bench
from labctl.runners.execute import RunResult, failure_details
from labctl.runners.spec import check_options


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def print_report(report: BenchReport) -> None:
    table = Table(title=f"bench: RC pingpong {report.size} B, {report.iters} iters x "
                  f"{report.rounds} rounds, {report.server} (server) <-> {report.client}")
    for column in ("implementation", "usec/iter (median)", "msg/s", "Mbit/s",
                   "msg rate vs C", "latency vs TCP", "runs (usec/iter)"):
        table.add_column(column, justify="left" if column == "implementation" else "right")
    c = report.impls.get("c")
    tcp = report.impls.get("tcp")
    for figures in report.impls.values():
        vs_c = (figures.msg_per_sec / c.msg_per_sec
                if c and c.msg_per_sec and figures.msg_per_sec else None)
        vs_tcp = (figures.usec_per_iter / tcp.usec_per_iter
                  if tcp and tcp.usec_per_iter and figures.usec_per_iter else None)
        runs = ", ".join(f"{u:.0f}" for u in figures.runs_usec)
        if figures.failures:
            runs += f" ({figures.failures} failed)"
        table.add_row(figures.label, _fmt(figures.usec_per_iter), _fmt(figures.msg_per_sec),
                      _fmt(figures.mbit_per_sec, 2), _fmt(vs_c, 2), _fmt(vs_tcp, 2), runs)
    console.print(table)
    ratios = report.ratios
    console.print(f"Python/C message rate: {_fmt(ratios['python_vs_c_msg_rate'], 2)} "
                  "(target >= 0.5)")
    console.print(f"RDMA (C) / TCP latency: {_fmt(ratios['c_vs_tcp_latency'], 2)}; "
                  f"Python RDMA / TCP latency: {_fmt(ratios['python_vs_tcp_latency'], 2)} "
                  "(< 1: RDMA faster)")


def require_matplotlib() -> None:
    """--plot needs the `plot` extra: say so before minutes of benchmarking, not after."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            "--plot needs matplotlib, which is not installed",
            hint="pip install 'labctl[plot]' (pipx: pipx inject labctl matplotlib)",
        ) from None


def _show_failure(r: RunResult) -> None:
    err_console.print(f"[bold red]{r.label} failed[/]: {r.reason}")
    err_console.print(failure_details(r), markup=False, soft_wrap=True)


def bench(
    server: str = ServerOption,
    client: str = ClientOption,
    size: int = typer.Option(4096, "--size", "-s", help="Message size in bytes."),
    iters: int = typer.Option(200, "--iters", "-n", help="Round trips per run."),
    rounds: int = typer.Option(3, "--rounds", help="Runs of each implementation (median).",
                               callback=int_range("--rounds", 1, 1000)),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    plot_file: str = typer.Option(None, "--plot", help="Draw a chart into this PNG file.",
                                 metavar="FILE.png"),
    timeout: float = TimeoutOption,
    lab: str = LabOption,
) -> None:
    """C ibv_rc_pingpong vs labctl's Python RC pingpong vs a TCP ping-pong (same size, same
    two nodes, same run): latency, message rate, throughput and their ratios."""
    check_options({"size": size, "iters": iters, "timeout": timeout})  # exit 2 before any run
    if plot_file:
        require_matplotlib()
    handle = open_lab(lab)
    server, client = pick_nodes(handle, server, client)

    def progress(name: str, round_no: int, result: RunResult) -> None:
        if not as_json:
            figure = result.figures.get("usec_per_iter")
            err_console.print(f"round {round_no}/{rounds} {name}: {result.status}"
                              + (f" {figure} usec/iter" if figure is not None else "")
                              + (f" ({result.reason})" if result.reason else ""))

    report = run_bench(handle, server, client, size=size, iters=iters, rounds=rounds,
                       timeout=timeout, progress=progress)
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print_report(report)
    if plot_file:
        plot(report, plot_file)
        if not as_json:
            console.print(f"chart: {plot_file}")
    for failure in report.failed:
        _show_failure(failure)
    if report.failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
