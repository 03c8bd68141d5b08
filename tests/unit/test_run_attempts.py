"""When the runner tries a failed run again (a known race), and what the record says."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from labctl.runners import execute
from labctl.runners.example_spec import Endpoint
from labctl.runners.examples import EXAMPLES
from labctl.runners.execute import MAX_ATTEMPTS, SETUP_FAILED, RunResult, _worth_another_attempt
from labctl.topology.load import load_lab

TWO_NODE = Path(__file__).parents[2] / "topologies" / "two-node.yaml"

RDMA_SERVER = EXAMPLES[("rdma-server", "rc")]
PINGPONG = EXAMPLES[("pingpong", "rc")]
PERFTEST_R = EXAMPLES[("perftest", "ib_write_bw")]


def _failed(reason: str, client_output: str = "") -> RunResult:
    return RunResult("x", "y", "node1", "node2", "failed", reason=reason,
                     client_output=client_output)


def test_a_timed_out_rdma_client_is_the_documented_race() -> None:
    why = _worth_another_attempt(RDMA_SERVER, _failed("client exited with 124 (timed out)"))
    assert "acknowledged" in why and "unlimited on rxe" in why


@pytest.mark.parametrize("reason", ["client exited with 255", "server exited with 124",
                                    "server did not start listening"])
def test_other_rdma_server_failures_are_final(reason: str) -> None:
    assert _worth_another_attempt(RDMA_SERVER, _failed(reason)) == ""


def test_a_timeout_is_final_for_examples_without_a_known_race() -> None:
    assert _worth_another_attempt(PINGPONG, _failed("client exited with 124 (timed out)")) == ""


def test_a_rejected_setup_is_tried_again_only_where_declared() -> None:
    rejected = "Event: RDMA_CM_EVENT_REJECTED; error: 8"
    assert rejected in PERFTEST_R.setup_failed
    assert _worth_another_attempt(PERFTEST_R, _failed("client exited with 1", rejected))
    assert _worth_another_attempt(PINGPONG, _failed("client exited with 1", rejected)) == ""


SIW_STALL = "client exited with 124 (timed out)"


def test_a_perftest_client_timed_out_before_it_connected_is_tried_again() -> None:
    """The siw stall of a CI run: the client printed nothing, the server's QP in ERR."""
    why = _worth_another_attempt(PERFTEST_R, _failed(SIW_STALL, ""))
    assert why == "the client's connection setup never finished"
    warning = " WARNING: BW peak won't be measured in this run.\n"
    assert _worth_another_attempt(PERFTEST_R, _failed(SIW_STALL, warning)) == why


def test_a_perftest_client_timed_out_after_it_connected_is_final() -> None:
    """Past the header rule it was in its data phase: a stall there is not retried."""
    connected = "-" * 87 + "\n                    RDMA_Write BW Test\n"
    assert _worth_another_attempt(PERFTEST_R, _failed(SIW_STALL, connected)) == ""
    assert _worth_another_attempt(PERFTEST_R, _failed("client exited with 1",
                                                      connected + "Bad wc status\n")) == ""
    assert _worth_another_attempt(PINGPONG, _failed(SIW_STALL, "")) == ""


@pytest.mark.parametrize("reason, output", [
    # siw's initiator waits 10 s for the MPA reply: a server slower to accept gets this
    # (reproduced with the server held 15 s before rdma_accept; docs/reliability.md item 11)
    ("client exited with 1", "Unexpected CM event bl blka 7\n"
                             " Unable to perform rdma_client function\n"),
    # the exchange QP flushed before the header rule (a fresh siw lab, load 5-7)
    ("client exited with 1", "Bad wc status -- 5 -- 5 \n Unable to read from socket/rdma_cm\n"),
    # perftest's own reconnect after a refused connect crashed
    ("client exited with 139", "ERRNO: Connection refused.\nFailed to connect RDMA CM events.\n"),
])
def test_a_perftest_client_failed_before_it_connected_is_tried_again(reason: str,
                                                                      output: str) -> None:
    why = _worth_another_attempt(PERFTEST_R, _failed(reason, output))
    assert why in ("the client failed before its connection was set up",
                   SETUP_FAILED)
    assert _worth_another_attempt(PINGPONG, _failed(reason, output)) == ""


def test_a_refused_siw_connect_is_tried_again() -> None:
    """perftest -R on siw in a CI run: the server listened, had a cm_id in CONNECT for the
    client and its QP in ERR; the client printed this and exited 255."""
    refused = ("Failed to connect through RDMA CM.\nERRNO: Connection refused.\n"
               "Failed to handle RDMA CM event.\nERRNO: Connection refused.\n")
    why = _worth_another_attempt(PERFTEST_R, _failed("client exited with 255", refused))
    assert why == SETUP_FAILED
    assert _worth_another_attempt(PINGPONG, _failed("client exited with 255", refused)) == ""


# Each RDMA CM client's output when its connect failed, as the programs printed it in a
# siw-pair lab (rdma-core 56.1, 2026-11-24): "timed out" with the server stopped after it
# listened (siw gives up after 10 s without the MPA reply: the slow-server race), "refused"
# with no server. riostream's "Invalid argument" is CI's (ee1861b): the server held a cm_id
# in CONNECT with its QP in ERR. The exit codes are the programs' own.
CONNECT_FAILED = [
    ("riostream", "client exited with 8",
     "rpoll: Invalid argument\nname      bytes   xfers   iters   total       time     Gb/sec"
     "    usec/xfer\n"),
    ("riostream", "client exited with 8",
     "rpoll: Connection timed out\nname      bytes   xfers   iters   total       time     "
     "Gb/sec    usec/xfer\n"),
    ("rstream", "client exited with 8",
     "rpoll: Connection refused\nname      bytes   xfers   iters   total       time     "
     "Gb/sec    usec/xfer\n"),
    ("ucmatose", "client exited with 146",
     "cmatose: starting client\ncmatose: connecting\n"
     "cmatose: event: RDMA_CM_EVENT_UNREACHABLE, error: -110\ntest complete\n"
     "return status -110\n"),
    ("ucmatose", "client exited with 255",
     "cmatose: failure connecting: Connection refused\ncmatose: starting client\n"
     "cmatose: connecting\ntest complete\nreturn status -1\n"),
    ("rdma-server", "client exited with 255",
     "rdma_connect: Connection timed out\nrdma_client: start\nrdma_client: end -1\n"),
    ("rping", "client exited with 255",
     "cma event RDMA_CM_EVENT_UNREACHABLE, error -110\nwait for CONNECTED state 4\n"
     "connect error -1\n"),
    # refused, rping then hangs until its bound
    ("rping", "client exited with 124 (timed out)",
     "rdma_connect: Connection refused\nconnect error -1\n"),
    ("rcopy", "client exited with 255", "rconnect failed\n: Connection timed out\n"),
]
SPEC_OF = {"riostream": EXAMPLES[("riostream", "rsocket")],
           "rstream": EXAMPLES[("rstream", "rsocket")],
           "ucmatose": EXAMPLES[("ucmatose", "rc")], "rdma-server": RDMA_SERVER,
           "rping": EXAMPLES[("rping", "rc")], "rcopy": EXAMPLES[("rcopy", "rsocket")]}


@pytest.mark.parametrize(("example", "reason", "output"), CONNECT_FAILED)
def test_a_client_whose_connect_failed_is_tried_again(example: str, reason: str,
                                                      output: str) -> None:
    assert _worth_another_attempt(SPEC_OF[example], _failed(reason, output)) == SETUP_FAILED
    # the same words mean nothing to a program that does not print them on a connect
    assert _worth_another_attempt(PINGPONG, _failed(reason, output)) == ""


# Failures after the connection was set up stay final. Built from each program's messages
# in rdma-core's librdmacm/examples (perror and printf texts), not seen in a lab.
AFTER_CONNECT = [
    ("riostream", "client exited with 1", "name      bytes   xfers   iters   total       time"
     "     Gb/sec    usec/xfer\nriowrite: Connection reset by peer\n"),
    ("ucmatose", "client exited with 1", "cmatose: starting client\ncmatose: connecting\n"
     "receiving data transfers\ncmatose: failed polling CQ: -1\n"),
    ("rdma-server", "client exited with 255",
     "rdma_client: start\nrdma_get_recv_comp: Connection reset by peer\n"),
    ("rping", "client exited with 255", "ping data: rdma-ping-0: ABCDEFGHIJKL\n"
     "cq completion failed status 5\n"),
    ("rcopy", "client exited with 255", "opening...transferring"),
]


@pytest.mark.parametrize(("example", "reason", "output"), AFTER_CONNECT)
def test_a_client_that_failed_after_it_connected_is_final(example: str, reason: str,
                                                          output: str) -> None:
    assert _worth_another_attempt(SPEC_OF[example], _failed(reason, output)) == ""


def test_udaddy_declares_no_connect_failure() -> None:
    """UD makes no connection: nothing in udaddy's output is a failed connect."""
    assert EXAMPLES[("udaddy", "ud")].setup_failed == ()


def test_a_passed_run_is_never_tried_again() -> None:
    passed = RunResult("x", "y", "node1", "node2", "passed")
    assert _worth_another_attempt(RDMA_SERVER, passed) == ""


def _fake_lab(monkeypatch: pytest.MonkeyPatch, outcomes: list[str]) -> list[int]:
    """run_example on the real two-node lab model, against scripted attempts: each outcome
    is a reason ("" = passed); nothing runs in a node."""
    calls: list[int] = []

    def endpoint(handle: Any, node: str, iface: Any = None) -> Endpoint:
        return Endpoint(node, "rxe0", "rxe", 1, "10.77.1.1", "eth1")

    def attempt(handle: Any, spec: Any, ctx: Any, result: RunResult, timeout: float) -> None:
        reason = outcomes[len(calls)]
        calls.append(len(calls) + 1)
        result.status, result.reason = ("failed", reason) if reason else ("passed", "")

    monkeypatch.setattr(execute, "endpoint", endpoint)
    monkeypatch.setattr(execute, "_attempt", attempt)
    monkeypatch.setattr(execute.counters, "read_all",  # no node to read counters from
                        lambda handle, nodes, timeout: dict.fromkeys(nodes))
    return calls


def _handle() -> SimpleNamespace:
    return SimpleNamespace(lab=load_lab(TWO_NODE))


def test_the_record_says_why_an_earlier_attempt_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_lab(monkeypatch, ["client exited with 124 (timed out)", ""])
    result = execute.run_example(_handle(), RDMA_SERVER, "node1", "node2", {})  # type: ignore[arg-type]
    assert (result.status, result.attempts, calls) == ("passed", 2, [1, 2])
    assert result.retried[0].startswith("attempt 1: client exited with 124 (timed out) (")


def test_attempts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_lab(monkeypatch, ["client exited with 124 (timed out)"] * 5)
    result = execute.run_example(_handle(), RDMA_SERVER, "node1", "node2", {})  # type: ignore[arg-type]
    assert (result.status, result.attempts, len(calls)) == ("failed", MAX_ATTEMPTS, MAX_ATTEMPTS)
    assert len(result.retried) == MAX_ATTEMPTS - 1
    assert result.reason == "client exited with 124 (timed out)"


STALLED = f"{execute.SERVER_STALLED} 15 s after the client finished"


@pytest.mark.parametrize("transport", ["rc", "srq"])
def test_an_rc_pingpong_server_left_waiting_is_the_last_ack_race(transport: str) -> None:
    """Seen in the reliability module at load 9: the client printed its 20 iterations, the
    server's QP stayed in RTS resending its last SEND to a QP that no longer existed."""
    why = _worth_another_attempt(EXAMPLES[("pingpong", transport)], _failed(STALLED))
    assert "before rxe acknowledged" in why


@pytest.mark.parametrize("spec", [EXAMPLES[("pingpong", "uc")], EXAMPLES[("pingpong", "ud")],
                                  RDMA_SERVER, PERFTEST_R])
def test_a_server_left_waiting_is_final_without_acks_or_a_known_race(spec: Any) -> None:
    assert _worth_another_attempt(spec, _failed(STALLED, "-" * 40)) == ""
