"""qperf and libfabric's fi_pingpong (`labctl run qperf`, `labctl run fabric`): their
parsers on outputs captured from `labctl run ... --json` in a lab of two rxe and two siw
nodes on trixie-workloads (qperf 0.4.11, libfabric 2.1.0, qemu TCG), and what each run
asks of the nodes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from labctl.errors import UsageError
from labctl.runners.example_spec import Endpoint, ExampleSpec, RunContext, check_options
from labctl.runners.examples import EXAMPLES
from labctl.runners.execute import check_image_packages
from labctl.runners.fabric import FABRIC, PINGPONGS, parse_fabric
from labctl.runners.qperf import (
    QPERF,
    SIW_BI_BW_END_RACE,
    parse_qperf,
    unsupported_reason,
)
from labctl.topology.resolved import Node

OUTPUTS = Path(__file__).parent / "outputs"
RXE = Endpoint("rxe1", "rxe0", "rxe", 1, "10.77.1.1")
SIW = Endpoint("siw1", "siw0", "siw", None, "10.77.1.3")


def output(name: str) -> str:
    return (OUTPUTS / name).read_text()


def rows(figures: dict[str, object]) -> dict[str, dict[str, object]]:
    found = figures["rows"]
    assert isinstance(found, list)
    return {row["test"]: row for row in found}


# --- qperf ------------------------------------------------------------------------------------
def test_qperf_on_siw_normalises_units_and_reports_the_unsupported_tests() -> None:
    figures = parse_qperf(output("qperf.client.siw.txt"))
    by_test = rows(figures)
    assert by_test["rc_lat"]["latency_us"] == 1520.0  # "1.52 ms"
    assert by_test["tcp_lat"]["latency_us"] == 1280.0  # "1.28 ms"
    assert by_test["tcp_bw"]["bw_mb_per_s"] == 23.0  # "23 MB/sec"
    assert by_test["rc_bw"]["status"] == "unsupported"
    assert "failed to create QP: Invalid argument" in str(by_test["rc_bw"]["reason"])
    assert by_test["ud_lat"]["status"] == "unsupported"
    assert "RC only" in str(by_test["ud_lat"]["reason"])
    assert (figures["passed"], figures["unsupported"], figures["failed"]) == (3, 2, 0)
    assert figures["rdma_latency_us"] == 1520.0 and figures["tcp_latency_us"] == 1280.0
    assert figures["tcp_bw_mb_per_s"] == 23.0 and "rdma_bw_mb_per_s" not in figures


def test_qperf_keeps_a_failed_tests_own_message_and_the_others_figures() -> None:
    figures = parse_qperf(output("qperf.client.rxe.txt"))  # rc_bw hit the CM reject race
    by_test = rows(figures)
    assert by_test["rc_bw"]["status"] == "failed"
    assert by_test["rc_bw"]["reason"] == "unexpected event from RDMA CM: Event rejected"
    assert by_test["rc_lat"]["latency_us"] == 3620.0
    assert by_test["tcp_bw"]["bw_mb_per_s"] == 15.3
    assert figures["failed"] == 1 and figures["passed"] == 3


def test_qperf_units_other_than_ms_and_mb() -> None:
    text = ("labctl: test rc_lat\nrc_lat:\n    latency  =  544 us\nlabctl: exit rc_lat 0\n"
            "labctl: test tcp_bw\ntcp_bw:\n    bw  =  912 KB/sec\nlabctl: exit tcp_bw 0\n")
    figures = parse_qperf(text)
    assert figures["rdma_latency_us"] == 544.0
    assert figures["tcp_bw_mb_per_s"] == 0.912


def test_qperf_output_without_figures_gives_no_figures() -> None:
    assert parse_qperf("") == {}
    assert parse_qperf("rc_lat:\n    latency  =  1 ms\n") == {}  # no marks: not ours
    failed = parse_qperf("labctl: test rc_lat\nrc_lat:\nboom\nlabctl: exit rc_lat 1\n")
    assert list(failed) == ["rows"] and rows(failed)["rc_lat"]["reason"] == "boom"


def test_qperf_uses_rdma_cm_for_rc_and_skips_unsupported_tests_on_the_node() -> None:
    ctx = RunContext(SIW, SIW, check_options({"tests": "rc_lat,ud_lat,tcp_bw",
                                              "duration": 3}))
    script = QPERF.client_argv(ctx)[2]
    assert "qperf 10.77.1.3 -lp 19765 -t 3 -cm1 rc_lat" in script
    assert "qperf 10.77.1.3 -lp 19765 -t 3 tcp_bw" in script
    assert "-t 3 ud_lat" not in script and "labctl: unsupported ud_lat: " in script
    assert script.endswith("qperf 10.77.1.3 -lp 19765 quit >/dev/null\nexit $rc")


@pytest.mark.parametrize(("tests", "endpoint", "refused"), [
    ("ud_lat", SIW, True), ("ud_lat,uc_lat", RXE, True), ("rc_bw", SIW, True),
    ("rc_lat,ud_lat", SIW, False), ("rc_bw", RXE, False), ("tcp_lat", SIW, False)])
def test_qperf_refuses_a_run_with_nothing_the_device_can_measure(
        tests: str, endpoint: Endpoint, refused: bool) -> None:
    assert QPERF.refuse is not None
    reason = QPERF.refuse(RunContext(endpoint, endpoint, {"tests": tests}))
    assert bool(reason) is refused
    if refused:
        assert all(f"{t}: {unsupported_reason(t, endpoint.device_type)}" in reason
                   for t in tests.split(","))


def test_qperf_unknown_test_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(UsageError) as refused:
        QPERF.client_argv(RunContext(RXE, RXE, {"tests": "rc_lat,sdp_lat"}))
    assert refused.value.exit_code == 2 and "sdp_lat" in refused.value.message
    assert refused.value.hint is not None and "rc_bi_bw" in refused.value.hint


@pytest.mark.parametrize("value", ["", "rc_lat;reboot", "RC_LAT", ",", "a" * 41, 3,
                                   ",".join(["x"] * 33)])
def test_the_tests_option_takes_a_list_of_plain_names_only(value: object) -> None:
    with pytest.raises(UsageError):
        check_options({"tests": value})


def test_the_tests_option_drops_repeats() -> None:
    assert check_options({"tests": "rc_lat,tcp_lat,rc_lat"})["tests"] == "rc_lat,tcp_lat"


# --- libfabric --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["fabric.client.rxe.txt", "fabric.server.rxe.txt",
                                  "fabric.client.siw.txt"])
def test_fabric_rows_for_every_provider_and_endpoint(name: str) -> None:
    figures = parse_fabric(output(name))
    by_test = rows(figures)
    assert list(by_test) == list(PINGPONGS)
    for row in by_test.values():
        assert row["status"] == "passed"
        assert row["size"] == 4096 and row["iterations"] == 100
        assert isinstance(row["latency_us"], float) and row["latency_us"] > 0
        assert isinstance(row["bw_mb_per_s"], float) and row["bw_mb_per_s"] > 0
    assert figures["passed"] == 4 and figures["failed"] == 0


def test_fabric_exact_figures_and_the_best_of_each_transport() -> None:
    figures = parse_fabric(output("fabric.client.rxe.txt"))
    by_test = rows(figures)
    assert by_test["verbs-msg"]["latency_us"] == 18715.12
    assert by_test["verbs-msg"]["bw_mb_per_s"] == 0.22
    assert by_test["verbs-rdm"]["seconds"] == 6.13
    assert by_test["verbs-rdm"]["provider"] == "verbs;ofi_rxm"
    assert figures["rdma_latency_us"] == 18715.12 and figures["tcp_latency_us"] == 7247.19
    assert figures["rdma_bw_mb_per_s"] == 0.22 and figures["tcp_bw_mb_per_s"] == 0.57


def test_fabric_a_server_that_crashed_fails_its_row() -> None:
    # siw: the verbs;ofi_rxm server printed its result, then "Segmentation fault" (139)
    by_test = rows(parse_fabric(output("fabric.server.siw.txt")))
    assert by_test["verbs-rdm"]["status"] == "failed"
    assert by_test["verbs-rdm"]["reason"] == "fi_pingpong exited with 139"
    assert by_test["verbs-rdm"]["latency_us"] == 26625.47
    assert by_test["tcp-rdm"]["status"] == "passed"


def test_fabric_the_stacks_own_message_is_the_reason() -> None:
    text = ("labctl: test verbs-rdm\n"
            "fi_enable(): util/pingpong.c:1554, ret=-22 (Invalid argument)\n"
            "labctl: exit verbs-rdm 1\n")
    figures = parse_fabric(text)
    assert list(figures) == ["rows"]
    assert rows(figures)["verbs-rdm"]["reason"] == (
        "fi_enable(): util/pingpong.c:1554, ret=-22 (Invalid argument)")


def test_fabric_servers_on_consecutive_ports_and_the_client_against_each() -> None:
    ctx = RunContext(RXE, RXE, check_options({"tests": "verbs-rdm,tcp-msg", "size": 64,
                                              "iters": 10, "port": 5000}))
    server, client = FABRIC.server_argv(ctx)[2], FABRIC.client_argv(ctx)[2]
    assert ("env FI_UNIVERSE_SIZE=16 fi_pingpong -p 'verbs;ofi_rxm' -e rdm -S 64 -I 10 "
            "-B 5000") in server
    assert "fi_pingpong -p tcp -e msg -S 64 -I 10 -B 5001" in server
    assert "fi_pingpong -p tcp -e msg -S 64 -I 10 -P 5001 10.77.1.1" in client
    assert FABRIC.ready_probe is not None
    assert FABRIC.ready_probe(ctx).count("ss -Hltn") == 2


def test_fabric_ports_past_65535_are_refused() -> None:
    with pytest.raises(UsageError) as refused:
        FABRIC.client_argv(RunContext(RXE, RXE, {"port": 65534}))
    assert "65535" in refused.value.message
    assert refused.value.hint == "use --port 65532 or lower"


def test_both_are_catalogued_and_need_their_packages() -> None:
    assert EXAMPLES[("qperf", "rdma-tcp")].packages == ("qperf",)
    assert EXAMPLES[("fabric", "pingpong")].packages == ("libfabric-bin",)


@pytest.mark.parametrize("spec", [QPERF, FABRIC])
def test_a_node_on_the_default_image_is_refused(spec: ExampleSpec) -> None:
    node = Node(name="node1", index=1, rdma="rxe", memory_mib=512, cpus=1, image="trixie",
                interfaces=())
    with pytest.raises(UsageError) as refused:
        check_image_packages(spec, node)
    assert refused.value.exit_code == 2
    assert refused.value.message == (f"{spec.label}: node node1's image trixie lacks "
                                     f"{spec.packages[0]}")


def test_qperf_a_zero_figure_is_no_measurement() -> None:
    text = "labctl: test rc_lat\nrc_lat:\n    latency  =  0 ns\nlabctl: exit rc_lat 0\n"
    row = rows(parse_qperf(text))["rc_lat"]
    assert row["status"] == "failed" and "measured nothing" in str(row["reason"])


def test_fabric_a_total_with_a_fraction() -> None:
    # 64 KiB x 20 both ways: fi_pingpong prints the total as "2.5m"
    by_test = rows(parse_fabric(output("fabric.client.rxe.64k.txt")))
    assert by_test["verbs-msg"]["size"] == 65536
    assert by_test["verbs-msg"]["bw_mb_per_s"] == 2.30
    assert by_test["tcp-msg"]["latency_us"] == 33347.90


def _run_client_script(tmp_path: Path, endpoint: Endpoint, replies: list[tuple[int, str]],
                       tests: str) -> tuple[int, str]:
    """The client's script under sh, with a stub `qperf` that answers `replies` in turn
    (exit status, output) and records each call."""
    stub = tmp_path / "qperf"
    answers = tmp_path / "answers"
    answers.write_text("".join(f"{code}\t{text.replace(chr(10), '|')}\n"
                               for code, text in replies))  # one line per answer
    stub.write_text('#!/bin/sh\n[ "$4" = quit ] && exit 0\n'
                    f'echo "$*" >> {tmp_path}/calls\n'
                    f'line=$(head -n 1 {answers}); sed -i 1d {answers}\n'
                    'printf "%s\\n" "${line#*\t}" | tr "|" "\\n"; exit "${line%%\t*}"\n')
    stub.chmod(0o755)
    ctx = RunContext(endpoint, endpoint, check_options({"tests": tests}))
    script = QPERF.client_argv(ctx)[2].replace("sleep 1", "true")
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    result = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env,
                            timeout=30, check=False)
    return result.returncode, result.stdout


BI_BW = "rc_bi_bw:\n    bw  =  1.2 MB/sec"
GENERAL = "rc_bi_bw:\nserver: rc_bi_bw failed: General error"


def test_qperf_tries_siws_bi_bw_again_after_its_end_of_test_race(tmp_path: Path) -> None:
    code, out = _run_client_script(tmp_path, SIW, [(1, GENERAL), (0, BI_BW)], "rc_bi_bw")
    assert code == 0, out
    assert f"labctl: retry rc_bi_bw: {SIW_BI_BW_END_RACE}" in out
    row = rows(parse_qperf(out))["rc_bi_bw"]
    assert (row["status"], row["bw_mb_per_s"], row["retried"]) == ("passed", 1.2, 1)


def test_qperf_gives_up_after_three_tries_and_keeps_the_message(tmp_path: Path) -> None:
    code, out = _run_client_script(tmp_path, SIW, [(1, GENERAL)] * 3, "rc_bi_bw")
    assert code == 1 and out.count("labctl: retry rc_bi_bw") == 2
    row = rows(parse_qperf(out))["rc_bi_bw"]
    assert row["status"] == "failed" and row["reason"] == "server: rc_bi_bw failed: General error"


def test_the_same_message_on_rxe_is_a_failure_at_once(tmp_path: Path) -> None:
    code, out = _run_client_script(tmp_path, RXE, [(1, GENERAL), (0, BI_BW)], "rc_bi_bw")
    assert code == 1 and "labctl: retry" not in out
    assert (tmp_path / "calls").read_text().count("rc_bi_bw") == 1
