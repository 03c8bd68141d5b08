"""`labctl bench`'s sweep without a VM: size and implementation lists, the counters read
around each run, aggregation per size, the best point, the chart and the printed report."""

from __future__ import annotations

from pathlib import Path

import pytest

from labctl.errors import UsageError
from labctl.runners.bench import (
    C_RC_EVENTS,
    BenchReport,
    Counters,
    Delta,
    RunCost,
    chart_series,
    counters_command,
    delta,
    parse_counters,
    parse_impls,
    parse_sizes,
    plausible,
    plot,
    run_cost,
    size_label,
    summarize,
)
from labctl.runners.example_spec import Endpoint, RunContext
from labctl.runners.execute import RunResult

# head -n1 /proc/stat and the two packet counters, as a trixie node printed them
NODE_OUTPUT = "cpu  120 3 450 9000 7 11 60 0 0 0\n1000\n1200\n"


def _pp(usec: float, status: str = "passed") -> RunResult:
    figures = {"usec_per_iter": usec, "mbit_per_sec": 1.0} if status == "passed" else {}
    return RunResult("pingpong", "x", "node1", "node2", status, figures=figures)


def test_sizes_take_binary_suffixes_and_keep_order() -> None:
    assert parse_sizes("64,256,1K,4k,16K,64K") == [64, 256, 1024, 4096, 16384, 65536]
    assert parse_sizes(" 4096 , 1M,4096") == [4096, 1 << 20]  # spaces, duplicates dropped
    assert size_label(65536) == "64K" and size_label(1000) == "1000"


@pytest.mark.parametrize("text", ["", "64,,128", "1G", "-1", "0", "64;id", "1.5K", "32M"])
def test_bad_sizes_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_sizes(text)
    assert err.value.message.startswith("--sizes:") and err.value.hint


def test_impls() -> None:
    assert parse_impls("tcp, c-events,tcp") == ["tcp", "c-events"]
    with pytest.raises(UsageError, match="unknown implementation rdma"):
        parse_impls("c,rdma")
    with pytest.raises(UsageError):
        parse_impls(" , ")


def test_event_variant_adds_e_on_both_sides_and_keeps_the_address_last() -> None:
    ep = Endpoint("node1", "rxe0", "rxe", 1, "10.77.1.1", "eth1")
    ctx = RunContext(ep, Endpoint("node2", "rxe0", "rxe", 1, "10.77.1.2", "eth1"),
                     {"size": 64, "iters": 10})
    assert C_RC_EVENTS.server_argv(ctx)[-1] == "-e"
    client = C_RC_EVENTS.client_argv(ctx)
    assert client[0] == "ibv_rc_pingpong" and client[-2:] == ["-e", "10.77.1.1"]
    assert client[client.index("-s"):client.index("-s") + 2] == ["-s", "64"]


def test_counters_parse_and_reject() -> None:
    assert parse_counters(NODE_OUTPUT) == Counters(1000, 1200, 120 + 3 + 450 + 11 + 60, 60)
    assert parse_counters("") is None and parse_counters("cpu 1 2\n") is None
    assert counters_command("eth1")[-1].endswith("/sys/class/net/eth1/statistics/rx_packets")
    with pytest.raises(UsageError):
        counters_command("eth1; reboot")


def test_run_cost_is_marginal_per_round_trip() -> None:
    before = [Counters(0, 0, 100, 10), Counters(0, 0, 200, 0)]
    # 101 round trips: 202 messages, each one packet plus one ACK, 10 packets of setup
    after = [Counters(207, 207, 150, 30), Counters(207, 207, 230, 10)]
    run = delta(before, after)
    assert run == Delta(414.0, 80, 30)
    # the one-round-trip run: setup (10 packets, 60 ticks) plus one round trip
    baseline = Delta(14.0, 60, 25)
    cost = run_cost(run, baseline, 101)
    assert cost == RunCost(packets_per_msg=2.0, cpu_usec_per_iter=2000.0, softirq_share=0.25)
    assert delta([None, before[1]], after) is None and delta([], []) is None
    assert run_cost(run, None, 101) is None and run_cost(run, baseline, 1) is None
    # a noisy baseline larger than the run: no negative CPU
    assert run_cost(run, Delta(14.0, 90, 40), 101) == RunCost(2.0, 0.0, 0.0)


def test_implausible_cpu_figures_are_dropped() -> None:
    passed = _pp(1000)
    assert plausible(RunCost(2.0, 1500.0, 0.2), passed) == RunCost(2.0, 1500.0, 0.2)
    # more CPU than two vCPUs can spend in the round trip, or none at all: noise
    assert plausible(RunCost(2.0, 2500.0, 0.2), passed) == RunCost(2.0, None, None)
    assert plausible(RunCost(1.0, 0.0, 0.0), passed) == RunCost(1.0, None, None)
    assert plausible(None, passed) is None


def _report(accel: str = "tcg") -> BenchReport:
    cost = RunCost(3.0, 900.0, 0.5)
    return summarize("node1", "node2", 50, 3, {
        64: {"c": [_pp(3000), _pp(2000), _pp(2500)], "c-events": [_pp(1200)] * 3,
             "tcp": [_pp(1000)] * 3},
        4096: {"c": [_pp(6000)] * 3, "c-events": [_pp(1800), _pp(0, "failed"), _pp(1800)],
               "tcp": [_pp(2000)] * 3},
    }, {64: {"c-events": [cost, RunCost(5.0, 1100.0, 0.7)]}},
        link_mtu=9000, rdma_mtu="4096", accel=accel)


def test_sweep_aggregates_per_size_and_finds_the_best_point() -> None:
    report = _report()
    small, big = report.points
    assert report.sizes == [64, 4096] and small.impls["c"].usec_per_iter == 2500
    assert small.impls["c"].vs_tcp == 2.5 and small.ratios["c_events_vs_tcp_latency"] == 1.2
    assert small.impls["c-events"].packets_per_msg == 4.0
    assert small.impls["c-events"].cpu_usec_per_iter == 1000.0
    assert small.impls["c"].packets_per_msg is None  # no counters read: null, not 0
    assert big.impls["c-events"].failures == 1 and len(report.failed) == 1
    assert report.best == {"size": 4096, "impl": "c-events", "vs_tcp": 0.9}
    assert report.emulation_bound and "emulation-bound" in report.note
    assert not _report("kvm").emulation_bound and _report("kvm").note == ""


def test_chart_series_and_png(tmp_path: Path) -> None:
    series = chart_series(_report())
    assert series["tcp"] == ([64, 4096], [1000.0, 2000.0])
    assert series["c-events"] == ([64, 4096], [1200.0, 1800.0])
    pytest.importorskip("matplotlib")
    chart = tmp_path / "bench.png"
    plot(_report(), str(chart))
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 10_000


def test_printed_report_says_when_emulation_bound(capsys: pytest.CaptureFixture[str]) -> None:
    from labctl.cli.bench import print_report

    print_report(_report())
    out = capsys.readouterr().out
    assert "emulation-bound" in out and "TCG" in out
    assert "lowest RDMA latency relative to TCP" in out and "4K: 0.90x" in out
    print_report(_report("kvm"))
    assert "emulation-bound" not in capsys.readouterr().out
