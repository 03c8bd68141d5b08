"""Per-node `labctl stop|start|restart` and `up` of a lab that is up, on a live two-node
qemu lab of this module's own (made once, removed in the fixture's finalizer)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from labctl.lab import lifecycle
from tests.integration.conftest import labctl, live_lab, make_topology, passed_run

pytestmark = pytest.mark.integration

LAB = "itest-nodes"


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_topology(tmp_path_factory.mktemp("nodes"), "two-node.yaml", LAB)


@pytest.fixture(scope="module")
def node_lab(topology: Path) -> Iterator[lifecycle.UpResult]:
    yield from live_lab(topology, LAB)


def _states() -> dict[str, str]:
    result = labctl("status", "--lab", LAB, "--json")
    (lab,) = json.loads(result.stdout)["labs"]
    return {n["name"]: n["state"] for n in lab["nodes"]}


def test_stop_then_start_brings_the_node_back(node_lab: lifecycle.UpResult) -> None:
    stopped = labctl("stop", "node2", "--lab", LAB)
    assert stopped.returncode == 0, stopped.stderr
    assert _states() == {"node1": "running", "node2": "stopped"}
    again = labctl("stop", "node2", "--lab", LAB)
    assert again.returncode == 2 and "already stopped" in again.stderr
    started = labctl("start", "node2", "--lab", LAB)
    assert started.returncode == 0, started.stderr
    assert _states() == {"node1": "running", "node2": "running"}
    passed_run(LAB, "pingpong", "--iters", "100")  # asserts that it passed


def test_restart_keeps_the_nodes_addresses(node_lab: lifecycle.UpResult) -> None:
    before = labctl("exec", "node1", "--lab", LAB, "--", "cat", "/sys/class/net/eth1/address",
                    check=True).stdout
    labctl("restart", "node1", "--lab", LAB, check=True)
    after = labctl("exec", "node1", "--lab", LAB, "--", "cat", "/sys/class/net/eth1/address",
                   check=True).stdout
    assert after == before
    assert _states() == {"node1": "running", "node2": "running"}


def test_up_again_same_changed_and_recreated(node_lab: lifecycle.UpResult,
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
