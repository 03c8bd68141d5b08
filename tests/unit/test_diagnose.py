"""A failed run's node state (runners/diagnose.py): the shell text it runs in the node is
quoted, its counter filters read the real tools' output, and the details show it all."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from labctl.runners.diagnose import CM_COUNTERS_FILTER, RXE_COUNTERS_FILTER, snapshot_script
from labctl.runners.execute import RunResult, failure_details

# Recorded in a lab node (kernel 7.3, iproute2 of trixie): `rdma statistic show link rxe0/1`.
RDMA_STATISTIC = (Path(__file__).parent / "data" / "rdma-statistic-link.txt").read_text()


def _filter(text: str, pipeline: str) -> str:
    return subprocess.run(["sh", "-c", pipeline], input=text, capture_output=True, text=True,
                          check=True, timeout=10).stdout


def test_rxe_filter_keeps_the_nonzero_counters_by_name() -> None:
    lines = _filter(RDMA_STATISTIC, RXE_COUNTERS_FILTER).splitlines()
    assert lines[:2] == ["rxe sent_pkts 81", "rxe rcvd_pkts 102"]
    assert "rxe ack_deferred 19" in lines
    assert not any(line.endswith(" 0") for line in lines)  # zero counters are left out
    assert len(lines) == 7


def test_rxe_filter_reads_the_one_line_format_too() -> None:
    one_line = " ".join(RDMA_STATISTIC.split()) + "\n"  # older iproute2 prints one line
    assert (_filter(one_line, RXE_COUNTERS_FILTER)
            == _filter(RDMA_STATISTIC, RXE_COUNTERS_FILTER))


def test_cm_filter_names_each_nonzero_counter() -> None:
    grep_output = "cm_tx_msgs/req:15\ncm_tx_msgs/rep:0\ncm_tx_retries/req:3\n"
    assert _filter(grep_output, CM_COUNTERS_FILTER) == (
        "cm cm_tx_msgs/req 15\ncm cm_tx_retries/req 3\n")


def test_hostile_names_reach_the_node_shell_quoted() -> None:
    script = snapshot_script("rxe0;reboot", "eth1$(id)")
    assert "'rxe0;reboot'" in script and "'eth1$(id)'" in script
    for word in shlex.split(script.replace(";", " ; ")):
        assert word not in {"reboot", "id"}


def test_failure_details_show_each_nodes_state_after_the_outputs() -> None:
    result = RunResult("rdma-server", "rc", "node1", "node2", "failed",
                       server_argv=["rdma_server", "-s", "10.77.1.1"],
                       client_argv=["rdma_client", "-s", "10.77.1.1"],
                       server_output="rdma_server: start\n", client_output="rdma_client: start\n",
                       diagnostics={"node1": "cm_id:\nLISTEN", "node2": "cm cm_tx_retries/req 9"})
    text = failure_details(result)
    assert text.index("--- client node2: rdma_client -s 10.77.1.1") < text.index(
        "--- node1 state at the failure:\ncm_id:\nLISTEN")
    assert text.endswith("--- node2 state at the failure:\ncm cm_tx_retries/req 9")
    assert result.to_dict()["diagnostics"] == result.diagnostics
