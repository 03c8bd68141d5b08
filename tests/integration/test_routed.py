"""Routed RoCE v2, live: topologies/routed.yaml (node1 and node2 on two segments joined by a
router node without RDMA). The routes and forwarding node-init set up, and RC pingpong and
rping passing across the router with the GIDs and the IP TTLs in their records; the
learning path's lines that name the routed lab are run here, on this lab."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from labctl.lab.handle import LabHandle
from tests.integration.conftest import labctl, make_topology, only_record
from tests.integration.modulelab import ModuleLab, module_lab
from tests.unit.test_learning_path import run_commands

pytestmark = pytest.mark.integration
ROUTED_LAB = os.environ.get("LABCTL_TEST_ROUTED_LAB", "itest-routed")
# The learning path's runs on the routed lab (they name it with --lab routed).
PAGE_LINES = [w for w in run_commands() if w[-2:] == ["--lab", "routed"]]


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_topology(tmp_path_factory.mktemp("routed"), "routed.yaml", ROUTED_LAB)


routed_lab = module_lab(ROUTED_LAB)


@pytest.fixture(scope="module")
def routed(routed_lab: ModuleLab) -> LabHandle:
    return routed_lab.handle


def test_router_forwards_and_nodes_route_through_it(routed: LabHandle) -> None:
    forward = routed.run("router", ["cat", "/proc/sys/net/ipv4/ip_forward"], timeout=60)
    assert forward.stdout.strip() == "1"
    routes = routed.run("node1", ["ip", "-4", "route", "show", "10.77.2.0/24"], timeout=60)
    assert routes.stdout.split()[:3] == ["10.77.2.0/24", "via", "10.77.1.1"]
    routes = routed.run("node2", ["ip", "-4", "route", "show", "10.77.1.0/24"], timeout=60)
    assert routes.stdout.split()[:3] == ["10.77.1.0/24", "via", "10.77.2.1"]


def _check_routed_record(record: dict[str, object]) -> None:
    assert record["status"] == "passed", record
    assert (record["server"], record["client"]) == ("node1", "node2")
    assert record["path"] == {"routers": ["router"], "hops": 1,
                              "server_gid": "::ffff:10.77.1.2",
                              "client_gid": "::ffff:10.77.2.2"}
    capture = record["capture"]
    assert isinstance(capture, dict)
    # Captured at node1's link: node1's packets leave with TTL 64, node2's arrive with 63.
    ttls = {(f["src"], f["dst"]): f["ttl"] for f in capture["ttl"]}
    assert ttls == {("10.77.1.2", "10.77.2.2"): 64, ("10.77.2.2", "10.77.1.2"): 63}
    assert capture["hops"] == 1


@pytest.mark.parametrize("words", PAGE_LINES, ids=[" ".join(w) for w in PAGE_LINES])
def test_learning_path_runs_across_the_router(routed: LabHandle, words: list[str]) -> None:
    args = [*words[:-1], ROUTED_LAB]
    result = labctl(*args, timeout=600)
    assert result.returncode == 0, f"labctl {' '.join(args)}\n{result.stdout}\n{result.stderr}"
    record = only_record(result.stdout)
    _check_routed_record(record)
    if record["example"] == "pingpong":  # the GIDs as ibv_rc_pingpong printed them
        assert record["figures"]["local_gid"] == "::ffff:10.77.2.2"
        assert record["figures"]["remote_gid"] == "::ffff:10.77.1.2"
