"""A live soft-iWARP pair: up, status, RDMA CM programs, refusals, inspector, lost TCP
segments (labctl fault); the lab is the module's own (modulelab: down at the module's end,
nothing left)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from labctl.lab.handle import LabHandle
from labctl.runners.execute import RunResult, failure_details
from tests.integration.conftest import labctl, make_topology, only_record
from tests.integration.hotplug import check_hot_plug
from tests.integration.modulelab import ModuleLab, module_lab
from tests.integration.siwstall import RPING_ATTEMPTS, siw_stall

pytestmark = pytest.mark.integration
SIW_LAB = os.environ.get("LABCTL_TEST_SIW_LAB", "itest-siw")


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_topology(tmp_path_factory.mktemp("siw"), "siw-pair.yaml", SIW_LAB)


siw = module_lab(SIW_LAB)


@pytest.fixture(scope="module")
def siw_lab(siw: ModuleLab) -> LabHandle:
    return siw.handle


def test_status_shows_iwarp_devices(siw_lab: LabHandle) -> None:
    (status,) = json.loads(labctl("status", "--lab", SIW_LAB, "--json", check=True).stdout)["labs"]
    for node in status["nodes"]:
        assert node["state"] == "running"
        (device,) = node["devices"]
        assert device["name"] == "siw0"
        assert device["port_state"] == "ACTIVE"
        assert device["gid_index"] is None  # iWARP: no RoCE GIDs to pick
        assert device["node_type"] == "4: RNIC"


def rping_until_it_passes(*args: str) -> dict[str, Any]:
    """`labctl run rping ARGS --json` on the siw lab, tried again after siw's own stall only
    (siwstall.py): the passed record."""
    stalls: list[str] = []
    for _ in range(RPING_ATTEMPTS):
        result = labctl("run", "rping", "--lab", SIW_LAB, "--timeout", "40", *args, "--json",
                        timeout=300)
        assert result.stdout, f"exit {result.returncode}, no record:\n{result.stderr}"
        record: dict[str, Any] = only_record(result.stdout)
        if record["status"] == "passed":
            assert result.returncode == 0
            if stalls:
                print(f"rping on siw passed after {len(stalls)} stall(s): {stalls}")
            return record
        stall = siw_stall(record)
        assert stall, result.stderr
        stalls.append(stall)
    raise AssertionError(f"rping stalled {RPING_ATTEMPTS} times in a row on siw: {stalls}")


def test_rping_passes_over_siw(siw_lab: LabHandle) -> None:
    record = rping_until_it_passes("--count", "5")
    assert record["figures"]["pings"] == 5


def test_perftest_uses_rdma_cm_on_siw(siw_lab: LabHandle) -> None:
    """A client stalled in its RDMA CM connect or refused there while the server listened
    (each seen once in CI: the server's QP in ERR) is tried again by the runner; bounded at
    60 s a try."""
    result = labctl("run", "perftest", "ib_send_bw", "--lab", SIW_LAB, "--iters", "50",
                    "--timeout", "60", "--json", timeout=400)
    assert result.returncode == 0, result.stderr
    record = only_record(result.stdout)
    assert record["status"] == "passed"
    assert "-R" in record["client_argv"]
    if record["attempts"] > 1:
        print(f"perftest on siw took {record['attempts']} attempts: {record['retried']}")


@pytest.mark.parametrize("transport", ["rc", "ud"])
def test_verbs_pingpong_is_reported_unsupported(siw_lab: LabHandle, transport: str) -> None:
    result = labctl("run", "pingpong", "--lab", SIW_LAB, "--transport", transport, "--json",
                    timeout=120)
    record = only_record(result.stdout)
    assert result.returncode == 2
    assert "refused" in result.stderr
    assert record["status"] == "skipped"
    assert "iWARP" in record["reason"] or "siw" in record["reason"]


@pytest.mark.parametrize("args", [[], ["-v"], ["-l"], ["-d", "siw0"], ["-i", "2"]])
def test_inspector_matches_c_devinfo_on_siw(siw_lab: LabHandle, args: list[str]) -> None:
    c_tool = siw_lab.run("node1", ["ibv_devinfo", *args], timeout=120)
    ours = siw_lab.run("node1", siw_lab.node_python("labctl.verbs", "devinfo", *args),
                       timeout=120)
    assert (ours.stdout, ours.returncode) == (c_tool.stdout, c_tool.returncode)


# Stalls in siw runs, each allowed once by its signature (a second failure fails; the first
# is printed): rdma_server/rdma_client hung once in three runs, the client had printed
# "start" and no more. rcopy's client hung once in a full CI run (2026-11-23) after
# "opening...": the failure snapshot showed the server's rsocket listening and no
# connection on either node. Neither cause is known.
STALLS = {"rdma-server": "rdma_client: start", "rcopy": "opening..."}
ON_SIW = [("rdma-server", []), ("ucmatose", ["--connections", "2", "--count", "4"]),
          ("riostream", ["--count", "20"]), ("rcopy", ["-s", "4096"])]


@pytest.mark.parametrize(("example", "args"), ON_SIW, ids=[e for e, _ in ON_SIW])
def test_librdmacm_example_passes_on_siw(siw_lab: LabHandle, example: str,
                                         args: list[str]) -> None:
    for attempt in (1, 2):
        result = labctl("run", example, *args, "--lab", SIW_LAB, "--timeout", "40", "--json",
                        timeout=300)
        record = only_record(result.stdout)
        if record["status"] == "passed":
            assert result.returncode == 0
            break
        assert attempt == 1 and example in STALLS, result.stderr
        assert record["client_output"].strip() == STALLS[example], result.stderr
        print(f"{example}: the first attempt stalled; tried again. It said:\n{result.stderr}")
    figures = record["figures"]
    if example == "rdma-server":
        assert figures == record["server_figures"] == {"end": 0}
    elif example == "ucmatose":
        assert figures["return_status"] == record["server_figures"]["return_status"] == 0
    elif example == "riostream":
        assert figures["xfers"] == 20 and figures["usec_per_xfer"] > 0
    else:
        assert record["server_figures"] == {"done": True, "received_bytes": 4096,
                                            "identical": True}


REFUSED_ON_SIW = [(["udaddy"], "Operation not supported"), (["cmtime"], "cmtime"),
                  (["rstream"], "hangs"), (["perftest", "ib_atomic_lat"], "ATOMIC_NONE"),
                  (["perftest", "ib_atomic_bw"], "ATOMIC_NONE")]


@pytest.mark.parametrize(("args", "why"), REFUSED_ON_SIW, ids=[a[-1] for a, _ in REFUSED_ON_SIW])
def test_librdmacm_example_refused_on_siw(siw_lab: LabHandle, args: list[str],
                                          why: str) -> None:
    result = labctl("run", *args, "--lab", SIW_LAB, "--json", timeout=120)
    record = only_record(result.stdout)
    assert result.returncode == 2 and "refused" in result.stderr
    assert record["status"] == "skipped" and why in record["reason"]


def test_shipped_topology_is_siw(tmp_path: Path) -> None:
    result = labctl("validate", "topologies/siw-pair.yaml", "--json", check=True)
    assert {n["rdma"] for n in json.loads(result.stdout)["nodes"]} == {"siw"}


def test_rping_capture_decodes_iwarp(siw_lab: LabHandle, tmp_path: Path) -> None:
    """`run rping --capture` on siw: the MPA handshake, then DDP/RDMAP messages over TCP."""
    from labctl.wire.summary import decode_file

    record = rping_until_it_passes("--count", "3", "--capture-dir", str(tmp_path))
    opcodes = record["capture"]["opcodes"]
    assert opcodes["MPA_REQUEST"] == opcodes["MPA_REPLY"] == 1
    assert opcodes["RDMA_READ_REQUEST"] == opcodes["RDMA_READ_RESPONSE"] == 3
    assert opcodes["RDMA_WRITE"] == 3
    frames = decode_file(Path(record["capture"]["pcap"]))
    assert not [f for f in frames if "not decoded" in f.note]


def test_devices_made_and_removed_under_a_running_helper(siw_lab: LabHandle) -> None:
    check_hot_plug(siw_lab, siw_lab.lab.nodes[0].name, "siw")


def test_siw_lost_segments_are_tcp_retransmits(siw_lab: LabHandle) -> None:
    """labctl fault under siw (docs/faults.md): three lost TCP segments are TCP's to
    recover; rping passes, the retransmits show in node2's TCP counters."""
    def fault_listed() -> list[dict[str, Any]]:
        out = labctl("fault", "list", "--lab", SIW_LAB, "--json", check=True).stdout
        faults: list[dict[str, Any]] = json.loads(out)["faults"]
        return faults

    stalls = []
    try:
        for _ in range(RPING_ATTEMPTS):  # siw's own stall (siwstall.py): a fresh fault, again
            labctl("fault", "clear", "--lab", SIW_LAB, check=True)
            labctl("fault", "add", "node2:eth1", "drop", "--tcp", "--skip", "5", "--count", "3",
                   "--lab", SIW_LAB, "--json", check=True)
            out = labctl("run", "rping", "--lab", SIW_LAB, "--json", timeout=600).stdout
            record = only_record(out)
            if record["status"] == "passed" or not siw_stall(record):
                break
            stalls.append(siw_stall(record))
        assert record["status"] == "passed", failure_details(RunResult(**record)) + f"{stalls}"
        assert fault_listed()[0]["hit"] == 3
        tcp = record["counters"]["node2"]["tcp"]
        assert tcp["RetransSegs"] >= 1  # TCP recovers; the verbs user sees nothing
        assert "rxe0/1" not in record["counters"]["node2"]  # siw has no device counters
    finally:
        labctl("fault", "clear", "--lab", SIW_LAB, check=True)
