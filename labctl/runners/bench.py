"""`labctl bench`: C RC pingpong vs the Python one vs a plain TCP ping-pong, same nodes, same run.

Each round runs the three back to back (rotating their order, so a burst of load on the
shared host does not always hit the same one); the report takes the median per
implementation, so one noisy run under TCG does not decide the ratios.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from labctl.lab.handle import LabHandle
from labctl.runners.examples import EXAMPLES, PINGPONG_PORT, RDMA_DEVICES, listening_probe
from labctl.runners.execute import RunResult, run_example
from labctl.runners.parsers import parse_pingpong
from labctl.runners.spec import ExampleSpec, RunContext


def _tcp_args(ctx: RunContext) -> list[str]:
    args = ["--tcp", "-p", str(ctx.opt("port", PINGPONG_PORT))]
    for option, flag in (("size", "-s"), ("iters", "-n")):
        if ctx.opt(option) is not None:
            args += [flag, str(ctx.opt(option))]
    return args


TCP_PINGPONG = ExampleSpec(
    name="pingpong",
    variant="tcp",
    server_argv=lambda ctx: LabHandle.node_python("labctl.nodeside.pingpong", *_tcp_args(ctx)),
    client_argv=lambda ctx: LabHandle.node_python("labctl.nodeside.pingpong", *_tcp_args(ctx),
                                                  ctx.server.address),
    parse=parse_pingpong,
    parse_server=parse_pingpong,
    devices=RDMA_DEVICES,  # any node with a data address; the device is not used
    ready_probe=lambda ctx: listening_probe(ctx.opt("port", PINGPONG_PORT)),
    key_figure="usec_per_iter",
)

# implementation -> spec, in the order of the report
BENCH_SPECS: dict[str, ExampleSpec] = {
    "c": EXAMPLES[("pingpong", "rc")],
    "python": EXAMPLES[("pingpong", "rc-py")],
    "tcp": TCP_PINGPONG,
}
LABELS = {"c": "C ibv_rc_pingpong", "python": "Python RC pingpong (pyverbs)",
          "tcp": "TCP socket ping-pong"}


@dataclass
class ImplFigures:
    name: str
    label: str
    usec_per_iter: float | None = None  # median over the passed runs
    msg_per_sec: float | None = None  # one message each way per iteration: 1e6 / usec
    mbit_per_sec: float | None = None  # median, as the programs report it (both ways)
    runs_usec: list[float] = field(default_factory=list)
    failures: int = 0


@dataclass
class BenchReport:
    server: str
    client: str
    size: int
    iters: int
    rounds: int
    impls: dict[str, ImplFigures]
    ratios: dict[str, float | None]
    failed: list[RunResult] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["failed"] = [r.to_dict() for r in self.failed]
        return data


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def summarize(server: str, client: str, size: int, iters: int, rounds: int,
              results: dict[str, list[RunResult]]) -> BenchReport:
    impls: dict[str, ImplFigures] = {}
    failed: list[RunResult] = []
    for name, runs in results.items():
        figures = ImplFigures(name, LABELS.get(name, name))
        passed = [r for r in runs if r.status == "passed" and "usec_per_iter" in r.figures]
        failed += [r for r in runs if r.status != "passed"]
        figures.failures = len(runs) - len(passed)
        figures.runs_usec = [float(r.figures["usec_per_iter"]) for r in passed]
        if passed:
            figures.usec_per_iter = round(statistics.median(figures.runs_usec), 2)
            figures.msg_per_sec = round(1e6 / figures.usec_per_iter, 2)
            figures.mbit_per_sec = round(statistics.median(
                float(r.figures.get("mbit_per_sec", 0.0)) for r in passed), 2)
        impls[name] = figures
    c, py, tcp = (impls.get(k, ImplFigures(k, k)) for k in ("c", "python", "tcp"))
    ratios = {
        # the figure: Python message rate as a fraction of C's (>= 0.5 wanted)
        "python_vs_c_msg_rate": _ratio(py.msg_per_sec, c.msg_per_sec),
        # RDMA-vs-TCP latency: < 1 means RDMA is faster than TCP
        "c_vs_tcp_latency": _ratio(c.usec_per_iter, tcp.usec_per_iter),
        "python_vs_tcp_latency": _ratio(py.usec_per_iter, tcp.usec_per_iter),
    }
    return BenchReport(server, client, size, iters, rounds, impls, ratios, failed)


def run_bench(handle: LabHandle, server: str, client: str, *, size: int, iters: int,
              rounds: int, timeout: float | None = None,
              progress: Callable[[str, int, RunResult], None] | None = None) -> BenchReport:
    options: dict[str, Any] = {"size": size, "iters": iters, "timeout": timeout}
    names = list(BENCH_SPECS)
    results: dict[str, list[RunResult]] = {name: [] for name in names}
    for round_no in range(rounds):
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:
            result = run_example(handle, BENCH_SPECS[name], server, client, dict(options))
            results[name].append(result)
            if progress:
                progress(name, round_no + 1, result)
    return summarize(server, client, size, iters, rounds, results)


def plot(report: BenchReport, path: str) -> None:
    """Latency and message rate side by side, one bar per implementation, runs as dots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, f in report.impls.items() if f.usec_per_iter is not None]
    labels = [report.impls[n].label.replace(" (pyverbs)", "\n(pyverbs)") for n in names]
    colors = {"c": "#1f77b4", "python": "#ff7f0e", "tcp": "#7f7f7f"}
    fig, (lat_ax, rate_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, title in ((lat_ax, "usec_per_iter", "latency per round trip (usec, median)"),
                           (rate_ax, "msg_per_sec", "message rate (msg/s, median)")):
        values = [getattr(report.impls[n], key) for n in names]
        bars = ax.bar(range(len(names)), values, color=[colors.get(n, "#2ca02c") for n in names])
        for i, n in enumerate(names):
            runs = report.impls[n].runs_usec
            points = runs if key == "usec_per_iter" else [1e6 / u for u in runs]
            ax.scatter([i] * len(points), points, color="black", s=12, zorder=3)
        ax.bar_label(bars, fmt="%.0f")
        ax.set_xticks(range(len(names)), labels, fontsize=8)
        ax.set_title(title, fontsize=10)
    ratio = report.ratios.get("python_vs_c_msg_rate")
    tcp = report.ratios.get("c_vs_tcp_latency")
    fig.suptitle(f"RC pingpong {report.size} B, {report.iters} iters x {report.rounds} rounds, "
                 f"{report.server} <-> {report.client}; Python/C msg rate "
                 f"{ratio if ratio is not None else '-'}, C/TCP latency "
                 f"{tcp if tcp is not None else '-'}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
