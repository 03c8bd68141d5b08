"""`labctl bench`: RDMA pingpongs against a plain TCP ping-pong, swept over message sizes.

Per size and round the implementations run back to back between the same two nodes
(rotating their order, so a burst of load on the shared host does not always hit the same
one); the report takes the median per implementation and size, so one noisy run under TCG
does not decide the ratios. Around every run both nodes' counters are read (the data
interface's packets, the guest's CPU ticks), and once per implementation and size around a
run of one round trip: the difference is the marginal cost of a round trip, packets per
message and guest CPU, the evidence for why a figure is what it is.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from typing_extensions import TypedDict

from labctl.bounded import parse_int
from labctl.errors import UsageError
from labctl.lab.handle import LabHandle
from labctl.runners.example_spec import ExampleSpec, RunContext
from labctl.runners.examples import EXAMPLES, PINGPONG_PORT, RDMA_DEVICES
from labctl.runners.execute import RunResult, run_example
from labctl.runners.pairs import pair_interfaces
from labctl.runners.parsers import parse_pingpong
from labctl.runners.probes import listening_probe


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

_C_RC = EXAMPLES[("pingpong", "rc")]
# ibv_rc_pingpong -e: both sides sleep on a completion channel instead of busy-polling the
# CQ, so on a one-vCPU node the poll loop does not compete with rxe's own work.
C_RC_EVENTS = dataclasses.replace(
    _C_RC,
    variant="rc-events",
    server_argv=lambda ctx: [*_C_RC.server_argv(ctx), "-e"],
    # the server address stays last: the client's argv ends with it
    client_argv=lambda ctx: [*_C_RC.client_argv(ctx)[:-1], "-e", ctx.server.address],
)

# implementation -> spec, in the order of the report
BENCH_SPECS: dict[str, ExampleSpec] = {
    "c": _C_RC,
    "c-events": C_RC_EVENTS,
    "python": EXAMPLES[("pingpong", "rc-py")],
    "tcp": TCP_PINGPONG,
}
LABELS = {"c": "C ibv_rc_pingpong (polling)", "c-events": "C ibv_rc_pingpong -e (events)",
          "python": "Python RC pingpong (pyverbs)", "tcp": "TCP socket ping-pong"}
DEFAULT_SIZES = (64, 256, 1024, 4096, 16384, 65536)
MAX_SIZE = 1 << 24
_SIZE = re.compile(r"(\d+)([KkMm]?)")


def parse_sizes(text: str) -> list[int]:
    """"64,256,1K,4K" -> [64, 256, 1024, 4096] (K and M are binary); bad input: UsageError."""
    sizes: list[int] = []
    for part in text.split(","):
        match = _SIZE.fullmatch(part.strip())
        if not match:
            raise UsageError(f"--sizes: {part.strip()!r} is not a size",
                             hint="a comma-separated list such as 64,256,1K,4K,16K,64K")
        digits = match.group(1)  # 5,000 digits would be Python's int-length ValueError
        size = (int(digits) if len(digits) < 10 else MAX_SIZE + 1) * {
            "": 1, "k": 1024, "m": 1 << 20}[match.group(2).lower()]
        if not 1 <= size <= MAX_SIZE:
            raise UsageError(f"--sizes: {part.strip()} is out of range",
                             hint=f"each size from 1 byte to {MAX_SIZE >> 20}M")
        if size not in sizes:
            sizes.append(size)
    return sizes


def parse_impls(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCH_SPECS]
    if unknown or not names:
        raise UsageError(f"--impls: unknown implementation {', '.join(unknown) or '(none)'}",
                         hint=f"choose from {','.join(BENCH_SPECS)}")
    return list(dict.fromkeys(names))


# --- counters around a run ---------------------------------------------------------------
USER_HZ = 100  # /proc/stat ticks per second (the Linux ABI value)


@dataclass(frozen=True)
class Counters:
    """One node's counters at one moment: its data interface's packets, CPU ticks."""

    tx_packets: int
    rx_packets: int
    busy_ticks: int  # user + nice + system + irq + softirq
    softirq_ticks: int


def counters_command(interface: str) -> list[str]:
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", interface):
        raise UsageError(f"bad interface name {interface!r}",
                         hint="data interfaces are eth1..eth99")
    base = f"/sys/class/net/{interface}/statistics"
    return ["sh", "-c", f"head -n1 /proc/stat; cat {base}/tx_packets {base}/rx_packets"]


def parse_counters(text: str) -> Counters | None:
    """`cpu  user nice system idle iowait irq softirq ...` then tx and rx packets."""
    lines = text.split()
    try:
        at = lines.index("cpu")
        ticks = [parse_int(v, "CPU ticks") for v in lines[at + 1:at + 8]]
        tx = parse_int(lines[at + 11], "tx_packets")
        rx = parse_int(lines[at + 12], "rx_packets")
    except (ValueError, IndexError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq = ticks
    return Counters(tx, rx, user + nice + system + irq + softirq, softirq)


@dataclass(frozen=True)
class Delta:
    """What one run changed, both nodes together."""

    link_packets: float  # packets on the data link (each node's tx + rx, averaged)
    busy_ticks: int
    softirq_ticks: int


def delta(before: list[Counters | None], after: list[Counters | None]) -> Delta | None:
    if not before or None in before or None in after:
        return None
    pairs = [(b, a) for b, a in zip(before, after, strict=True) if a and b]
    # every packet of the exchange leaves one node and enters the other: each node's
    # tx + rx is the link's count (averaged over the two readings)
    packets = sum((a.tx_packets - b.tx_packets) + (a.rx_packets - b.rx_packets)
                  for b, a in pairs) / len(pairs)
    return Delta(packets, sum(a.busy_ticks - b.busy_ticks for b, a in pairs),
                 sum(a.softirq_ticks - b.softirq_ticks for b, a in pairs))


@dataclass
class RunCost:
    """What one round trip cost, both nodes together: the run's counters minus those of
    the same implementation's one-iteration run (program start, connection setup, ssh)."""

    packets_per_msg: float  # data-link packets (both directions) per message
    cpu_usec_per_iter: float | None  # guest CPU busy time per round trip (both nodes)
    softirq_share: float | None  # the part of it spent in softirq (rxe's and the NIC's work)


def run_cost(run: Delta | None, baseline: Delta | None, iters: int) -> RunCost | None:
    """The marginal cost per round trip: (run - baseline) / (iters - 1)."""
    if run is None or baseline is None or iters <= 1:
        return None
    extra = iters - 1
    busy = max(run.busy_ticks - baseline.busy_ticks, 0)
    soft = max(run.softirq_ticks - baseline.softirq_ticks, 0)
    return RunCost(packets_per_msg=round((run.link_packets - baseline.link_packets)
                                         / (2 * extra), 2),
                   cpu_usec_per_iter=round(busy * 1e6 / USER_HZ / extra, 1),
                   softirq_share=round(min(soft / busy, 1.0), 3) if busy else 0.0)


def plausible(cost: RunCost | None, result: RunResult) -> RunCost | None:
    """The CPU figure only where it can be true: two one-vCPU nodes spend more than 0 and
    at most twice the round trip's wall time on it. Outside that, the run's start-up noise
    (seconds under a loaded TCG host) swamped it: no figure rather than a wrong one."""
    if cost is None or cost.cpu_usec_per_iter is None:
        return cost
    wall = result.figures.get("usec_per_iter")
    if wall is None or not 0 < cost.cpu_usec_per_iter <= 2 * float(wall):
        return dataclasses.replace(cost, cpu_usec_per_iter=None, softirq_share=None)
    return cost


# --- the report ------------------------------------------------------------------------------
@dataclass
class ImplFigures:
    name: str
    label: str
    usec_per_iter: float | None = None  # median over the passed runs
    msg_per_sec: float | None = None  # one message each way per iteration: 1e6 / usec
    mbit_per_sec: float | None = None  # median, as the programs report it (both ways)
    runs_usec: list[float] = field(default_factory=list)
    failures: int = 0
    vs_tcp: float | None = None  # latency / TCP's latency at this size (< 1: faster)
    packets_per_msg: float | None = None  # medians of the runs' costs
    cpu_usec_per_iter: float | None = None
    softirq_share: float | None = None


@dataclass
class SizePoint:
    size: int
    impls: dict[str, ImplFigures]
    ratios: dict[str, float | None]


class BestPoint(TypedDict):
    """The RDMA implementation and size closest to (or below) TCP's latency."""

    size: int
    impl: str
    vs_tcp: float


@dataclass
class BenchReport:
    """`labctl bench --json` prints it (docs/json.md)."""


    server: str
    client: str
    sizes: list[int]
    iters: int
    rounds: int
    link_mtu: int | None
    rdma_mtu: str  # the rxe port's active MTU, as `up` read it ("" unknown)
    accel: str  # tcg, kvm, "" (not a VM lab)
    emulation_bound: bool
    note: str
    points: list[SizePoint]
    best: BestPoint | None  # the size where RDMA is fastest relative to TCP
    failed: list[RunResult] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["failed"] = [r.to_dict() for r in self.failed]
        return data


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def summarize_size(size: int, results: dict[str, list[RunResult]],
                   costs: dict[str, list[RunCost]] | None = None) -> tuple[SizePoint,
                                                                           list[RunResult]]:
    impls: dict[str, ImplFigures] = {}
    failed: list[RunResult] = []
    costs = costs or {}
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
        own = costs.get(name, [])
        figures.packets_per_msg = _median([c.packets_per_msg for c in own])
        figures.cpu_usec_per_iter = _median([c.cpu_usec_per_iter for c in own
                                             if c.cpu_usec_per_iter is not None])
        figures.softirq_share = _median([c.softirq_share for c in own
                                         if c.softirq_share is not None])
        impls[name] = figures
    tcp = impls.get("tcp")
    for figures in impls.values():
        figures.vs_tcp = _ratio(figures.usec_per_iter, tcp.usec_per_iter if tcp else None)
    c, py = impls.get("c"), impls.get("python")
    events = impls.get("c-events")
    ratios = {
        # the first bench's figure: Python message rate as a fraction of C's (>= 0.5 wanted)
        "python_vs_c_msg_rate": _ratio(py.msg_per_sec if py else None,
                                       c.msg_per_sec if c else None),
        # RDMA-vs-TCP latency: < 1 means RDMA is faster than TCP
        "c_vs_tcp_latency": c.vs_tcp if c else None,
        "c_events_vs_tcp_latency": events.vs_tcp if events else None,
        "python_vs_tcp_latency": py.vs_tcp if py else None,
    }
    return SizePoint(size, impls, ratios), failed


def best_point(points: list[SizePoint]) -> BestPoint | None:
    """The (size, RDMA implementation) with the lowest latency relative to TCP."""
    found: BestPoint | None = None
    for point in points:
        for name, figures in point.impls.items():
            if name == "tcp" or figures.vs_tcp is None:
                continue
            if found is None or figures.vs_tcp < found["vs_tcp"]:
                found = BestPoint(size=point.size, impl=name, vs_tcp=figures.vs_tcp)
    return found


# The share of the ICRC was traced in the guests (docs/performance.md, "ICRC / TCG cost").
EMULATION_NOTE = (
    "emulation-bound: the nodes run under TCG (no KVM), so every figure is the emulated "
    "CPU's cost of rxe's software transport (building and parsing each packet, its "
    "requester, responder and completer work, the virtio NIC; the ICRC is about 8 % of it), "
    "not RDMA's; compare implementations with each other, not with hardware")


def summarize(server: str, client: str, iters: int, rounds: int,
              per_size: dict[int, dict[str, list[RunResult]]],
              costs: dict[int, dict[str, list[RunCost]]] | None = None, *,
              link_mtu: int | None = None, rdma_mtu: str = "", accel: str = "") -> BenchReport:
    points: list[SizePoint] = []
    failed: list[RunResult] = []
    for size, results in per_size.items():
        point, bad = summarize_size(size, results, (costs or {}).get(size))
        points.append(point)
        failed += bad
    emulated = accel == "tcg"
    return BenchReport(server, client, list(per_size), iters, rounds, link_mtu, rdma_mtu,
                       accel, emulated, EMULATION_NOTE if emulated else "", points,
                       best_point(points), failed)


def _read_counters(handle: LabHandle, nodes: list[tuple[str, str]]) -> list[Counters | None]:
    def one(pair: tuple[str, str]) -> Counters | None:
        node, interface = pair
        result = handle.run(node, counters_command(interface), timeout=60)
        return parse_counters(result.stdout) if result.returncode == 0 else None

    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        return list(pool.map(one, nodes))


def _measured(handle: LabHandle, spec: ExampleSpec, server: str, client: str,
              options: dict[str, Any], watched: list[tuple[str, str]]
              ) -> tuple[RunResult, Delta | None]:
    before = _read_counters(handle, watched) if watched else []
    result = run_example(handle, spec, server, client, dict(options))
    if not watched or result.status != "passed":
        return result, None
    return result, delta(before, _read_counters(handle, watched))


def run_bench(handle: LabHandle, server: str, client: str, *, sizes: list[int], iters: int,
              rounds: int, impls: list[str] | None = None, timeout: float | None = None,
              progress: Callable[[int, str, int, RunResult], None] | None = None
              ) -> BenchReport:
    names = impls or list(BENCH_SPECS)
    ifaces = pair_interfaces(handle.lab, server, client)
    watched = [(server, ifaces[0].name), (client, ifaces[1].name)] if ifaces else []
    state = handle.labdir.load_state()
    node_state = state.nodes.get(server)
    rdma_mtu = node_state.active_mtu if node_state else ""
    per_size: dict[int, dict[str, list[RunResult]]] = {}
    costs: dict[int, dict[str, list[RunCost]]] = {}
    for size in sizes:
        results: dict[str, list[RunResult]] = {name: [] for name in names}
        size_costs: dict[str, list[RunCost]] = {name: [] for name in names}
        options: dict[str, Any] = {"size": size, "iters": iters, "timeout": timeout}
        if rdma_mtu.isdigit():
            # the pingpongs' path MTU is 1024 unless told: use what the port offers (4096
            # on a 9000-byte link), or a jumbo link changes nothing for RDMA
            options["mtu"] = int(rdma_mtu)
        # per implementation and size, one run of a single round trip: what a run costs
        # besides its round trips, subtracted from each timed run's counters
        baselines: dict[str, Delta | None] = {}
        if watched and iters > 1:
            for name in names:
                _, baselines[name] = _measured(handle, BENCH_SPECS[name], server, client,
                                               {**options, "iters": 1}, watched)
        for round_no in range(rounds):
            shift = round_no % len(names)
            for name in names[shift:] + names[:shift]:
                result, run = _measured(handle, BENCH_SPECS[name], server, client, options,
                                        watched)
                cost = plausible(run_cost(run, baselines.get(name), iters), result)
                if cost is not None:
                    size_costs[name].append(cost)
                results[name].append(result)
                if progress:
                    progress(size, name, round_no + 1, result)
        per_size[size], costs[size] = results, size_costs
    return summarize(server, client, iters, rounds, per_size, costs,
                     link_mtu=ifaces[0].mtu if ifaces else None, rdma_mtu=rdma_mtu,
                     accel=state.accel)


def size_label(size: int) -> str:
    if size >= 1024 and size % 1024 == 0:
        return f"{size // 1024}K"
    return str(size)


COLORS = {"c": "#1f77b4", "c-events": "#2ca02c", "python": "#ff7f0e", "tcp": "#7f7f7f"}


def chart_series(report: BenchReport) -> dict[str, tuple[list[int], list[float]]]:
    """implementation -> (sizes, median usec per round trip), sizes where it passed."""
    series: dict[str, tuple[list[int], list[float]]] = {}
    for point in report.points:
        for name, figures in point.impls.items():
            if figures.usec_per_iter is not None:
                xs, ys = series.setdefault(name, ([], []))
                xs.append(point.size)
                ys.append(figures.usec_per_iter)
    return series


def plot(report: BenchReport, path: str) -> None:
    """Latency vs message size, one line per implementation (log-log), runs as dots; and
    each RDMA implementation's latency relative to TCP's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat_ax, rel_ax) = plt.subplots(1, 2, figsize=(12, 4.6))
    for name, (xs, ys) in chart_series(report).items():
        color = COLORS.get(name, "#9467bd")
        label = LABELS.get(name, name)
        lat_ax.plot(xs, ys, marker="o", color=color, label=label)
        for point in report.points:
            runs = point.impls[name].runs_usec if name in point.impls else []
            lat_ax.scatter([point.size] * len(runs), runs, color=color, s=8, alpha=0.5)
        if name != "tcp":
            rel = [(p.size, p.impls[name].vs_tcp) for p in report.points
                   if name in p.impls and p.impls[name].vs_tcp is not None]
            if rel:
                rel_ax.plot([s for s, _ in rel], [r for _, r in rel], marker="o",
                            color=color, label=label)
    ticks = report.sizes
    for ax in (lat_ax, rel_ax):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [size_label(s) for s in ticks])
        ax.set_xlabel("message size (bytes)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    lat_ax.set_yscale("log")
    lat_ax.set_ylabel("usec per round trip (median)")
    rel_ax.axhline(1.0, color=COLORS["tcp"], linestyle="--", linewidth=1)
    rel_ax.set_ylabel("latency / TCP latency (< 1: RDMA faster)")
    mtu = f"link MTU {report.link_mtu}, RDMA MTU {report.rdma_mtu or '?'}"
    title = (f"RC pingpong vs TCP, {report.server} <-> {report.client}, {mtu}, "
             f"{report.iters} iters x {report.rounds} rounds")
    if report.emulation_bound:
        title += "\nemulation-bound (TCG): software rxe on an emulated CPU"
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
