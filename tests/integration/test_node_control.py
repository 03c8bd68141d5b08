"""Per-node `labctl stop|start|restart` and `up` of a lab that is up, on a live two-node
qemu lab of this module's own (modulelab: made once, removed in the fixture's finalizer).
Lab name: LABCTL_TEST_NODES_LAB (default itest-nodes). A test that stops a node starts it
again in `finally`, so the next test finds both running whatever failed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import labctl, make_topology, passed_run
from tests.integration.modulelab import ModuleLab, module_lab

pytestmark = pytest.mark.integration

LAB = os.environ.get("LABCTL_TEST_NODES_LAB", "itest-nodes")


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_topology(tmp_path_factory.mktemp("nodes"), "two-node.yaml", LAB)


node_lab = module_lab(LAB)


def _states() -> dict[str, str]:
    result = labctl("status", "--lab", LAB, "--json")
    (lab,) = json.loads(result.stdout)["labs"]
    return {n["name"]: n["state"] for n in lab["nodes"]}


def _start_if_stopped(node: str) -> None:
    """The repair after a test that stopped `node`, whatever it got to."""
    if _states()[node] != "running":
        labctl("start", node, "--lab", LAB, check=True)


def test_stop_then_start_brings_the_node_back(node_lab: ModuleLab) -> None:
    try:
        stopped = labctl("stop", "node2", "--lab", LAB)
        assert stopped.returncode == 0, stopped.stderr
        assert _states() == {"node1": "running", "node2": "stopped"}
        again = labctl("stop", "node2", "--lab", LAB)
        assert again.returncode == 2 and "already stopped" in again.stderr
        started = labctl("start", "node2", "--lab", LAB)
        assert started.returncode == 0, started.stderr
        assert _states() == {"node1": "running", "node2": "running"}
    finally:
        _start_if_stopped("node2")
    passed_run(LAB, "pingpong", "--iters", "100")  # asserts that it passed


def test_restart_keeps_the_nodes_addresses(node_lab: ModuleLab) -> None:
    before = labctl("exec", "node1", "--lab", LAB, "--", "cat", "/sys/class/net/eth1/address",
                    check=True).stdout
    try:
        labctl("restart", "node1", "--lab", LAB, check=True)
    finally:
        _start_if_stopped("node1")
    after = labctl("exec", "node1", "--lab", LAB, "--", "cat", "/sys/class/net/eth1/address",
                   check=True).stdout
    assert after == before
    assert _states() == {"node1": "running", "node2": "running"}


def test_up_again_same_changed_and_recreated(node_lab: ModuleLab,
                                            topology: Path) -> None:
    same = labctl("up", str(topology))
    assert same.returncode == 0 and f"lab {LAB} is already up" in same.stdout
    data = yaml.safe_load(topology.read_text())
    data["nodes"]["node2"] = {"memory": 768}
    changed_file = topology.with_name("changed.yaml")
    changed_file.write_text(yaml.safe_dump(data))
    changed = labctl("up", str(changed_file))
    assert changed.returncode == 2
    assert "node node2: memory_mib 512 → 768" in changed.stderr
    recreated = labctl("up", str(changed_file), "--recreate")
    assert recreated.returncode == 0, recreated.stderr
    assert _states() == {"node1": "running", "node2": "running"}
