"""Every example the two-node rxe lab supports, run for real (small iteration counts: TCG).

The catalogue runs once per module, as `labctl run all --json` (the module-scoped `run_all`
fixture): each example's test reads its record from that run, the summary test checks the
run as a whole. What `run all` cannot ask for (perftest through RDMA CM, the Python/C
interop, mckey's one-QP wait, bench) runs in its own test. A failing example's command
lines and outputs (both sides) are in the assertion message.

The catalogue runs in one direction only (node1 serves): both nodes are the same image
and machine shape, restored from the same saved machine, so the other direction is the
same programs with the addresses swapped; `--pairs A:B` (server:client) is
test_pairs.py's, live, and `run all` takes its pairs through the same code as `run EXAMPLE`.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from typing import Any

import pytest

from labctl.lab.handle import LabHandle
from labctl.pytest_plugin import RdmaLab
from labctl.runners.example_spec import ExampleSpec
from labctl.runners.examples import EXAMPLES, KNOWN_LIMITATIONS, PERFTESTS
from labctl.runners.execute import RunResult, command_line, run_example
from tests.integration.conftest import LAB_NAME, example_programs_left, labctl, run_records

pytestmark = pytest.mark.integration

SERVER, CLIENT = "node1", "node2"
SMALL = {"iters": 100, "size": 1024, "count": 4}
# `run all -n 100`: every pingpong and perftest 100 iterations; every other option at the
# example's default (`labctl run EXAMPLE --help`): rping 10 pings, rstream and riostream 100
# transfers of 4 KiB, rcopy 64 KiB, mckey 4 messages, cmtime 10 connections.
RUN_ALL_ITERS = 100


def explain(result: RunResult) -> str:
    return (f"{result.label}: {result.status} ({result.reason})\n"
            f"--- server {result.server}: {command_line(result.server_argv)}\n"
            f"{result.server_output}\n--- client {result.client}: "
            f"{command_line(result.client_argv)}\n{result.client_output}")


def run(handle: LabHandle, name: str, variant: str, **options: Any) -> RunResult:
    return run_example(handle, EXAMPLES[(name, variant)], SERVER, CLIENT,
                       {**SMALL, **options})


def assert_passed(result: RunResult) -> None:
    assert result.status == "passed", explain(result)


# The workloads (spec.packages: qperf, libfabric) run on their own image, in
# tests/integration/workloads; on this lab's default image `run all` skips them (below).
ON_RXE = sorted(key for key, spec in EXAMPLES.items()
                if spec.supports("rxe") and key not in KNOWN_LIMITATIONS and not spec.packages)
WORKLOADS = sorted(key for key, spec in EXAMPLES.items() if spec.packages)


@dataclass(frozen=True)
class RunAll:
    """One `labctl run all --json` of the module: what it exited with, printed on stderr,
    its records, and the example programs it left running in the nodes (none, or killed)."""

    proc: subprocess.CompletedProcess[str]
    records: list[dict[str, Any]]
    left: dict[str, str]

    def result(self, name: str, variant: str) -> RunResult:
        """The record of one example, as the RunResult it was printed from."""
        found = [r for r in self.records if (r["example"], r["variant"]) == (name, variant)]
        assert len(found) == 1, f"run all has {len(found)} records of {name} {variant}"
        return RunResult(**found[0])


@pytest.fixture(scope="module")
def run_all(rdma_lab: RdmaLab) -> RunAll:
    """The whole catalogue between node1 (server) and node2 (client), once for the module;
    a failed example fails its own test (and the summary), not this fixture. The session
    lab's plugin fixture, not lab_handle: the tests that only read a record start nothing in
    the nodes, so the conftest's check for programs left after each test (two ssh runs) is
    made once, here, and the summary test reports it."""
    proc = labctl("run", "all", "--lab", LAB_NAME, "--json", "-n", str(RUN_ALL_ITERS))
    left = example_programs_left(rdma_lab.handle)
    try:
        records = run_records(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"labctl run all --json exited {proc.returncode} without JSON:\n"
                    f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    assert isinstance(records, list), proc.stdout
    return RunAll(proc, records, left)


@pytest.mark.parametrize(("name", "variant"), ON_RXE, ids=[f"{n}-{v}" for n, v in ON_RXE])
def test_example_passes_on_rxe(run_all: RunAll, name: str, variant: str) -> None:
    result = run_all.result(name, variant)
    assert (result.server, result.client) == (SERVER, CLIENT), explain(result)
    assert_passed(result)
    assert result.key_value() is not None, explain(result)
    if name == "pingpong":
        assert result.figures["iters"] == RUN_ALL_ITERS, explain(result)
        assert result.server_figures["iters"] == RUN_ALL_ITERS, explain(result)
    elif name == "rping":
        assert result.figures["pings"] == 10, explain(result)
    elif name == "perftest":
        assert result.figures["iterations"] == RUN_ALL_ITERS, explain(result)
        assert result.figures["gid_index"] == 1, explain(result)
        assert result.figures["rdma_cm"] is False, explain(result)
    elif name == "mckey":
        assert result.server_figures["delivered"] == result.server_figures["expected"] == 4, (
            explain(result))
    elif name in ("rdma-server", "udaddy", "ucmatose"):
        assert result.figures == result.server_figures, explain(result)
        assert result.figures.get("end", result.figures.get("return_status")) == 0, (
            explain(result))
    elif name == "cmtime":
        assert result.figures["connections"] == 10, explain(result)
        assert result.figures["full_connect_us"] > 0, explain(result)
    elif name in ("rstream", "riostream"):
        assert result.figures["xfers"] == 100, explain(result)
        assert result.figures["size"] == "4k", explain(result)
    elif name == "rcopy":
        assert result.figures["bytes"] == 65536, explain(result)
        assert result.server_figures["identical"] is True, explain(result)


@pytest.mark.parametrize("test", ["ib_send_lat", "ib_write_bw"])
def test_perftest_through_rdma_cm(lab_handle: LabHandle, test: str) -> None:
    result = run(lab_handle, "perftest", test, rdma_cm=True)
    assert_passed(result)
    assert result.figures["rdma_cm"] is True


def test_python_pingpong_interoperates_both_ways(lab_handle: LabHandle) -> None:
    """Python server + C client and C server + Python client exchange the same messages."""
    for variant in ("rc-py-c", "rc-c-py"):
        result = run(lab_handle, "pingpong", variant, size=4096)
        assert_passed(result)
        assert result.figures["bytes"] == result.server_figures["bytes"] == 4096 * 100 * 2


def test_mckey_from_one_qp_reports_its_shortfall(lab_handle: LabHandle) -> None:
    """All messages from one QP (mckey -C N): bounded, counted, never reported as passed
    unless every message arrived."""
    result = run(lab_handle, "mckey", "ud-1qp", wait=12)
    figures = result.server_figures
    assert figures["expected"] == 4 and "delivered" in figures, explain(result)
    if figures["delivered"] < 4:
        assert result.status == "failed"
        assert result.reason.startswith(f"delivered {figures['delivered']}/4"), explain(result)
    else:
        assert_passed(result)
    assert result.seconds < 60


def test_run_all_summary(run_all: RunAll) -> None:
    records, proc = run_all.records, run_all.proc
    assert not run_all.left, f"example programs left running by run all: {run_all.left}"
    failed = [r for r in records if r["status"] == "failed"]
    assert proc.returncode == (1 if failed else 0), proc.stderr
    assert not failed, proc.stderr
    by_key = {(r["example"], r["variant"]): r for r in records}
    assert set(by_key) == set(EXAMPLES) and len(records) == len(EXAMPLES)
    assert by_key[("mckey", "ud-1qp")]["status"] == "skipped"
    assert all(by_key[("perftest", t)]["status"] == "passed" for t in PERFTESTS)
    assert WORKLOADS
    for key in WORKLOADS:  # not on this image: skipped with the image that has them
        assert by_key[key]["status"] == "skipped", by_key[key]
        assert "'s image trixie lacks " in by_key[key]["reason"], by_key[key]
        assert "image: trixie-workloads" in by_key[key]["reason"], by_key[key]


def test_bench_json_and_plot(lab_handle: LabHandle, tmp_path: Any) -> None:
    """The sweep, small: one size, the C pingpongs (polling, events) and TCP once each,
    with their counters (the Python pingpong's pyverbs import would double the time; it
    has its own tests)."""
    chart = tmp_path / "bench.png"
    proc = labctl("bench", "--lab", LAB_NAME, "--json", "--rounds", "1", "-n", "30",
                  "--sizes", "4K", "--impls", "c,c-events,tcp", "--plot", str(chart))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert [p["size"] for p in report["points"]] == [4096]
    for point in report["points"]:
        assert set(point["impls"]) == {"c", "c-events", "tcp"}
        for figures in point["impls"].values():
            assert figures["usec_per_iter"] > 0 and figures["failures"] == 0
            # marginal per round trip: at least one packet per message; the CPU figure is
            # null where start-up noise swamped it, never more than two vCPUs can spend
            assert figures["packets_per_msg"] > 0.5
            cpu = figures["cpu_usec_per_iter"]
            assert cpu is None or 0 < cpu <= 2 * figures["usec_per_iter"]
    # 4 KiB is 4 packets at the lab's RDMA MTU (1024 on a 1500-byte link), plus ACKs
    point = report["points"][0]
    assert point["impls"]["c"]["packets_per_msg"] >= 4, point
    assert report["points"][0]["ratios"]["c_events_vs_tcp_latency"] > 0
    assert report["best"]["impl"] in {"c", "c-events"}
    assert report["emulation_bound"] == (report["accel"] == "tcg")
    assert chart.stat().st_size > 10_000


def test_a_run_given_up_leaves_nothing_running_in_the_node(lab_handle: LabHandle) -> None:
    """A client that fails at once: the runner gives up on the server, and stops it in the
    node (its whole process group), not only its own ssh. The server's output is kept."""
    spec = ExampleSpec(name="stuck", variant="", devices=frozenset({"rxe"}), parse=dict,
                       server_argv=lambda ctx: ["sh", "-c", "echo waiting; exec sleep 997"],
                       client_argv=lambda ctx: ["false"])
    result = run_example(lab_handle, spec, SERVER, CLIENT, {"timeout": 60})
    assert result.status == "failed" and result.reason == "client exited with 1", explain(result)
    assert "waiting" in result.server_output, explain(result)
    assert result.seconds < 30, result.seconds  # not the in-node bound (70 s)
    left = lab_handle.run(SERVER, ["pgrep", "-a", "-f", "sleep 997"], timeout=60)
    assert left.returncode == 1, f"still running in {SERVER}: {left.stdout}"
