"""`labctl bench`: RDMA pingpongs (C polling, C events, Python) vs a TCP ping-pong, swept
over message sizes between two nodes."""

from __future__ import annotations

import typer
from rich.table import Table

from labctl.cli import complete
from labctl.cli.common import (
    LabOption,
    console,
    err_console,
    int_range,
    path_option,
    run_value,
)
from labctl.cli.report import on_interrupt
from labctl.cli.run import ClientOption, ServerOption, TimeoutOption, run_interrupted
from labctl.cli.safeprint import print_json
from labctl.errors import UsageError
from labctl.lab.handle import open_lab
from labctl.runners.bench import (
    BENCH_SPECS,
    DEFAULT_SIZES,
    LABELS,
    BenchReport,
    parse_impls,
    parse_sizes,
    plot,
    run_bench,
    size_label,
)
from labctl.runners.example_spec import check_options
from labctl.runners.execute import RunResult, failure_details
from labctl.runners.pairs import select_pairs

DEFAULT_SIZES_TEXT = ",".join(size_label(size) for size in DEFAULT_SIZES)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def print_report(report: BenchReport) -> None:
    mtu = f"link MTU {report.link_mtu or '?'}, RDMA MTU {report.rdma_mtu or '?'}"
    table = Table(title=f"bench: RC pingpong vs TCP, {report.iters} iters x {report.rounds} "
                  f"rounds, {report.server} (server) <-> {report.client}, {mtu}")
    for column in ("size", "implementation", "usec/iter (median)", "msg/s", "Mbit/s",
                   "latency vs TCP", "pkts/msg", "guest CPU usec/iter", "softirq",
                   "runs (usec/iter)"):
        table.add_column(column, justify="left" if column == "implementation" else "right")
    for point in report.points:
        for i, figures in enumerate(point.impls.values()):
            runs = ", ".join(f"{u:.0f}" for u in figures.runs_usec)
            if figures.failures:
                runs += f" ({figures.failures} failed)"
            soft = (f"{figures.softirq_share:.0%}" if figures.softirq_share is not None
                    else "-")
            table.add_row(size_label(point.size) if i == 0 else "", figures.name,
                          _fmt(figures.usec_per_iter), _fmt(figures.msg_per_sec),
                          _fmt(figures.mbit_per_sec, 2), _fmt(figures.vs_tcp, 2),
                          _fmt(figures.packets_per_msg, 2), _fmt(figures.cpu_usec_per_iter, 0),
                          soft, runs, end_section=i == len(point.impls) - 1)
    console.print(table)
    for point in report.points:
        ratio = point.ratios.get("python_vs_c_msg_rate")
        if ratio is not None:
            console.print(f"{size_label(point.size)}: Python/C message rate {ratio:.2f} "
                          "(target >= 0.5)")
    if report.best:
        best = report.best
        console.print(f"lowest RDMA latency relative to TCP: {BENCH_SPECS[best['impl']].label}"
                      f" ({best['impl']}) at {size_label(best['size'])}: {best['vs_tcp']:.2f}x "
                      "TCP's (< 1: RDMA faster)")
    console.print("pkts/msg: data-link packets per message; guest CPU: both nodes' busy time "
                  "per round trip (each beyond a one-round-trip run of the same program)")
    console.print("; ".join(f"{name}: {label}" for name, label in LABELS.items()))
    if report.emulation_bound:
        console.print(f"[bold yellow]note[/]: {report.note}")


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
    sizes: str = typer.Option(DEFAULT_SIZES_TEXT, "--sizes",
                              "--size", "-s", metavar="BYTES,...",
                              help="Message sizes in bytes, comma-separated (K, M: binary)."),
    impls: str = typer.Option(",".join(BENCH_SPECS), "--impls",
                              metavar=",".join(BENCH_SPECS),
                              autocompletion=complete.comma_choices(*BENCH_SPECS),
                              help="Implementations to run, comma-separated: any of these."),
    iters: int = typer.Option(200, "--iters", "-n", metavar="COUNT", help="Round trips per run.",
                              callback=run_value("iters")),
    rounds: int = typer.Option(3, "--rounds",
                               metavar="COUNT", help="Runs of each implementation (median).",
                               callback=int_range("--rounds", 1, 1000)),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    plot_file: str = typer.Option(None, "--plot", help="Draw a chart into this PNG file.",
                                 metavar="FILE.png", callback=path_option("--plot", "write")),
    timeout: float = TimeoutOption,
    lab: str = LabOption,
) -> None:
    """C ibv_rc_pingpong (polling and -e) and labctl's Python RC pingpong vs a TCP ping-pong,
    per message size, between the same two nodes in one run: latency, message rate, packets
    and guest CPU per message, and the ratios to TCP."""
    size_list = parse_sizes(sizes)
    impl_list = parse_impls(impls)
    for size in size_list:  # exit 2 before any run
        check_options({"size": size, "iters": iters, "timeout": timeout})
    if plot_file:
        require_matplotlib()
    handle = open_lab(lab)
    on_interrupt(run_interrupted(timeout))
    [(server, client)] = select_pairs(handle.lab, server=server, client=client)

    def progress(size: int, name: str, round_no: int, result: RunResult) -> None:
        if not as_json:
            figure = result.figures.get("usec_per_iter")
            err_console.print(f"{size_label(size)} round {round_no}/{rounds} {name}: "
                              f"{result.status}"
                              + (f" {figure} usec/iter" if figure is not None else "")
                              + (f" ({result.reason})" if result.reason else ""))

    report = run_bench(handle, server, client, sizes=size_list, iters=iters, rounds=rounds,
                       impls=impl_list, timeout=timeout, progress=progress)
    if as_json:
        print_json(report.to_dict())
    else:
        print_report(report)
    if report.emulation_bound and as_json:
        err_console.print(f"note: {report.note}")
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
