"""Parsers and specs of the example runners, on outputs captured from real runs.

The files under tests/unit/outputs/ are the programs' output on a two-node rxe lab
(qemu TCG, kernel 7.3.4, rdma-core 56.1, perftest 25.01): `labctl run ... --json` records
and direct `labctl exec` runs of the same commands.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from labctl.nodeside import pingpong as pypp
from labctl.runners.bench import summarize
from labctl.runners.example_spec import Endpoint, RunContext
from labctl.runners.examples import EXAMPLES, KNOWN_LIMITATIONS, PERFTESTS, pingpong_variant
from labctl.runners.execute import RunResult, _shortfall
from labctl.runners.parsers import parse_mckey, parse_perftest, parse_pingpong, parse_rping

OUTPUTS = Path(__file__).parent / "outputs"


def output(name: str) -> str:
    return (OUTPUTS / name).read_text()


# --- pingpong ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["pingpong-rc-c.client.txt", "pingpong-rc-c.server.txt",
                                  "pingpong-rc-py.client.txt", "pingpong-rc-py.server.txt",
                                  "pingpong-tcp.client.txt", "pingpong-tcp.server.txt"])
def test_pingpong_closing_lines(name: str) -> None:
    figures = parse_pingpong(output(name))
    assert figures["iters"] == 200
    assert figures["bytes"] == 4096 * 200 * 2
    assert figures["usec_per_iter"] > 0 and figures["mbit_per_sec"] > 0


def test_pingpong_exact_values() -> None:
    figures = parse_pingpong(output("pingpong-rc-py.client.txt"))
    assert figures == {"bytes": 1638400, "seconds": 5.9, "mbit_per_sec": 2.22, "iters": 200,
                       "usec_per_iter": 29502.07, "local_gid": "::ffff:10.77.1.2",
                       "remote_gid": "::ffff:10.77.1.1"}


def test_python_and_c_pingpong_print_the_same_lines() -> None:
    """The Python client's output has the C one's shape line for line."""
    c_lines = output("pingpong-rc-c.server.txt").splitlines()
    py_lines = output("pingpong-rc-py.client.txt").splitlines()
    assert len(c_lines) == len(py_lines) == 4
    for c_line, py_line in zip(c_lines, py_lines, strict=True):
        assert c_line.split()[:2] == py_line.split()[:2]


def test_pingpong_nothing_on_failure() -> None:
    assert parse_pingpong("Couldn't connect to 10.77.1.1:18515\n") == {}


# --- Python pingpong wire format (rdma-core pingpong.c) -----------------------------------
def test_wire_message_matches_c_format() -> None:
    gid = bytes.fromhex("00000000000000000000ffff0a4d0101")
    msg = pypp.wire_message(0, 0x11, 0xABCDEF, gid)
    assert len(msg) == pypp.MSG_SIZE == 52
    assert msg == b"0000:000011:abcdef:00000000000000000000ffff0a4d0101\0"
    assert pypp.parse_wire(msg) == (0, 0x11, 0xABCDEF, gid)
    assert pypp.gid_text(gid) == "::ffff:10.77.1.1"


def test_pingpong_options_like_c() -> None:
    args = pypp.parse_args(["-d", "rxe0", "-g", "1", "-n", "10", "-s", "64", "-m", "2048",
                            "10.77.1.1"])
    assert (args.ib_dev, args.gid_idx, args.iters, args.size, args.mtu) == ("rxe0", 1, 10,
                                                                            64, 2048)
    assert args.servername == "10.77.1.1" and args.port == 18515 and args.rx_depth == 500
    with pytest.raises(SystemExit):
        pypp.parse_args(["-m", "1000"])


def test_pingpong_fault_lesson_options() -> None:
    """Not in ibv_rc_pingpong: the retry counts, the ACK timeout and the RNR lesson's delay."""
    args = pypp.parse_args([])
    assert (args.ack_timeout, args.retry_cnt, args.rnr_retry, args.rnr_delay) == (14, 7, 7, 0)
    args = pypp.parse_args(["--rnr-retry", "1", "--rnr-delay", "2.5", "10.77.1.1"])
    assert (args.rnr_retry, args.rnr_delay) == (1, 2.5)
    for bad in (["--rnr-delay", "-1"], ["--rnr-retry", "8"], ["--retry-cnt", "-1"],
                ["--ack-timeout", "32"]):
        with pytest.raises(SystemExit):
            pypp.parse_args(bad)


# --- rping ---------------------------------------------------------------------------------
def test_rping_counts_pings() -> None:
    assert parse_rping(output("rping.client.txt")) == {"pings": 5, "last_ping": 4,
                                                        "disconnected": True}
    assert parse_rping(output("rping.server.txt"))["pings"] == 5


def test_rping_connection_error() -> None:
    figures = parse_rping(output("rping-no-server.client.txt"))
    assert figures == {"cm_error": "RDMA_CM_EVENT_REJECTED (8)"}


# --- perftest ------------------------------------------------------------------------------
@pytest.mark.parametrize("test", PERFTESTS)
@pytest.mark.parametrize("side", ["client", "server"])
def test_perftest_result_row(test: str, side: str) -> None:
    figures = parse_perftest(output(f"perftest-{test}.{side}.txt"))
    assert figures["device"] == "rxe0" and figures["connection"] == "RC"
    assert figures["gid_index"] == 1 and figures["rdma_cm"] is False
    if (test, side) == ("ib_read_lat", "server"):
        assert "iterations" not in figures  # the passive side of RDMA READ prints no table
        return
    assert figures["iterations"] == 100
    if test.endswith("_lat"):
        assert figures["bytes"] == 2
        assert 0 < figures["t_min_usec"] <= figures["t_typical_usec"] <= figures["t_max_usec"]
        assert "bw_average" not in figures
    else:
        assert figures["bytes"] == 65536 and figures["bw_unit"] == "MiB/sec"
        assert figures["bw_average"] > 0 and figures["msg_rate_mpps"] > 0


def test_perftest_exact_values() -> None:
    lat = parse_perftest(output("perftest-ib_send_lat.client.txt"))
    assert lat["test"] == "Send Latency Test"
    assert (lat["t_typical_usec"], lat["t_avg_usec"], lat["p99_9_usec"]) == (4158.51, 4982.65,
                                                                             28504.52)
    bw = parse_perftest(output("perftest-ib_write_bw.client.txt"))
    assert bw["test"] == "RDMA_Write BW Test"
    assert (bw["bw_peak"], bw["bw_average"], bw["msg_rate_mpps"]) == (3.53, 3.08, 0.000049)


@pytest.mark.parametrize("name", ["perftest-ib_send_lat_R", "perftest-ib_write_bw_R"])
def test_perftest_rdma_cm(name: str) -> None:
    figures = parse_perftest(output(f"{name}.client.txt"))
    assert figures["rdma_cm"] is True
    assert "t_typical_usec" in figures or "bw_average" in figures


def test_perftest_nothing_without_table() -> None:
    assert "bw_average" not in parse_perftest(" Couldn't connect to 10.77.1.1:18515\n")


# --- mckey ---------------------------------------------------------------------------------
def test_mckey_receiver_counts() -> None:
    ok = parse_mckey(output("mckey-ud.receiver.txt"))
    assert ok["transfers_complete"] and ok["delivered"] == ok["expected"] == 4
    short = parse_mckey(output("mckey-ud-1qp.receiver.txt"))
    assert "transfers_complete" not in short
    assert (short["delivered"], short["expected"]) == (1, 4)


def test_mckey_sender() -> None:
    one_per_qp = parse_mckey(output("mckey-ud.sender.txt"))
    assert one_per_qp["joined"] == 4 and one_per_qp["dgid"] == "::ffff:239.1.1.1"
    assert one_per_qp["return_status"] == 0
    assert parse_mckey(output("mckey-ud-1qp.sender.txt"))["joined"] == 1


def _result(server_figures: dict[str, int], status: str = "failed") -> RunResult:
    return RunResult("mckey", "ud", "node1", "node2", status, figures={"joined": 1},
                     server_figures=server_figures)


def test_shortfall_is_reported() -> None:
    assert _shortfall(_result({"expected": 4, "delivered": 1})) == "delivered 1/4"
    assert _shortfall(_result({"expected": 4, "delivered": 4})) == ""
    assert "?/4" in _shortfall(_result({"expected": 4}))
    assert _shortfall(RunResult("rping", "rc", "a", "b", "passed")) == ""


# --- the catalogue -------------------------------------------------------------------------
ROCE = RunContext(Endpoint("node1", "rxe0", "rxe", 1, "10.77.1.1"),
                  Endpoint("node2", "rxe0", "rxe", 1, "10.77.1.2"), {"iters": 100})
IWARP = RunContext(Endpoint("node1", "siw0", "siw", None, "10.77.1.1"),
                   Endpoint("node2", "siw0", "siw", None, "10.77.1.2"), {})


def test_every_spec_declares_devices_and_a_key_figure() -> None:
    for (name, variant), spec in EXAMPLES.items():
        assert spec.devices <= {"rxe", "siw"} and spec.devices, (name, variant)
        assert spec.key_figure, (name, variant)
        if "siw" not in spec.devices:
            assert spec.unsupported_reason, (name, variant)
    assert set(KNOWN_LIMITATIONS) <= set(EXAMPLES)


def test_siw_runs_rdma_cm_rc_programs_only() -> None:
    """Established by running each in a siw-pair lab (tests/integration/test_siw.py)."""
    on_siw = {key for key, spec in EXAMPLES.items() if spec.supports("siw")}
    assert on_siw == {("rping", "rc"), *(("perftest", t) for t in PERFTESTS),
                      ("rdma-server", "rc"), ("ucmatose", "rc"), ("riostream", "rsocket"),
                      ("rcopy", "rsocket"),
                      # the workloads (tests/integration/workloads/test_qperf_fabric.py)
                      ("qperf", "rdma-tcp"), ("fabric", "pingpong")}


def test_perftest_argv() -> None:
    spec = EXAMPLES[("perftest", "ib_write_bw")]
    assert spec.server_argv(ROCE) == ["ib_write_bw", "-d", "rxe0", "-i", "1", "-F", "-n",
                                      "100", "-x", "1"]
    assert spec.client_argv(ROCE)[-1] == "10.77.1.1"
    siw = spec.client_argv(IWARP)
    assert "-R" in siw and "-x" not in siw
    cm = RunContext(ROCE.server, ROCE.client, {"rdma_cm": True})
    assert "-R" in spec.server_argv(cm) and "-x" not in spec.server_argv(cm)
    assert spec.ready_probe is not None
    assert "cm_id" in spec.ready_probe(cm) and "ss -Hltn" in spec.ready_probe(ROCE)


def test_rping_argv() -> None:
    spec = EXAMPLES[("rping", "rc")]
    assert spec.server_argv(ROCE) == ["rping", "-s", "-a", "10.77.1.1", "-C", "10", "-v"]
    assert spec.client_argv(RunContext(ROCE.server, ROCE.client, {"count": 3, "size": 64})) == [
        "rping", "-c", "-a", "10.77.1.1", "-C", "3", "-S", "64", "-v"]


def test_mckey_argv() -> None:
    sender = EXAMPLES[("mckey", "ud")].client_argv(ROCE)
    assert sender == ["mckey", "-m", "239.1.1.1", "-b", "10.77.1.2", "-s", "-c", "4", "-C",
                      "1"]
    one_qp = EXAMPLES[("mckey", "ud-1qp")].client_argv(ROCE)
    assert one_qp[-2:] == ["-C", "4"] and "-c" not in one_qp
    receiver = EXAMPLES[("mckey", "ud")].server_argv(ROCE)
    assert receiver[:2] == ["sh", "-c"] and "timeout 20 stdbuf -oL mckey" in receiver[2]
    assert "rdma statistic show link rxe0/1" in receiver[2]


def test_python_pingpong_variants() -> None:
    assert pingpong_variant("c", "c") == "rc"
    assert pingpong_variant("python", "python") == "rc-py"
    assert pingpong_variant("python", "c") == "rc-py-c"
    assert pingpong_variant("c", "python") == "rc-c-py"
    spec = EXAMPLES[("pingpong", "rc-py-c")]
    server = spec.server_argv(ROCE)
    assert server[-9:] == ["labctl.nodeside.pingpong", "-d", "rxe0", "-i", "1", "-g", "1",
                           "-n", "100"]
    assert spec.client_argv(ROCE)[:1] == ["ibv_rc_pingpong"]


# --- bench summary -------------------------------------------------------------------------
def _pp(usec: float, status: str = "passed") -> RunResult:
    figures = {"usec_per_iter": usec, "mbit_per_sec": 1.0} if status == "passed" else {}
    return RunResult("pingpong", "x", "node1", "node2", status, figures=figures)


def test_bench_summary_medians_and_ratios() -> None:
    report = summarize("node1", "node2", 100, 3, {4096: {
        "c": [_pp(1000), _pp(3000), _pp(2000)],
        "python": [_pp(4000), _pp(4000), _pp(0, "failed")],
        "tcp": [_pp(500), _pp(500), _pp(500)],
    }})
    point = report.points[0]
    assert point.impls["c"].usec_per_iter == 2000
    assert point.impls["python"].failures == 1 and len(report.failed) == 1
    assert point.ratios["python_vs_c_msg_rate"] == 0.5
    assert point.ratios["c_vs_tcp_latency"] == 4.0 and point.impls["c"].vs_tcp == 4.0
    assert point.ratios["c_events_vs_tcp_latency"] is None  # not run
    assert report.to_dict()["points"][0]["impls"]["tcp"]["msg_per_sec"] == 2000.0
    assert not report.emulation_bound and report.note == ""
