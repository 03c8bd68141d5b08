"""`--pairs all --jobs 2` live, on topologies/three-node-switch.yaml (three rxe nodes on
one switch): every pair runs, none two at once on a node, records in the pairs' order."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.conftest import labctl, make_topology, run_records
from tests.integration.modulelab import ModuleLab, module_lab

pytestmark = pytest.mark.integration
PAIRS_LAB = os.environ.get("LABCTL_TEST_PAIRS_LAB", "itest-pairs")


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_topology(tmp_path_factory.mktemp("pairs"), "three-node-switch.yaml", PAIRS_LAB)


pairs_lab = module_lab(PAIRS_LAB)


@pytest.fixture(scope="module")
def switch_lab(pairs_lab: ModuleLab) -> str:
    return pairs_lab.name


def test_pingpong_between_every_pair(switch_lab: str) -> None:
    result = labctl("run", "pingpong", "--pairs", "all", "--jobs", "2", "--iters", "5",
                    "--json", "--lab", switch_lab, timeout=600)
    assert result.returncode == 0, result.stderr
    records = run_records(result.stdout)
    assert [(r["server"], r["client"]) for r in records] == [
        ("node1", "node2"), ("node1", "node3"), ("node2", "node3")]
    for record in records:
        assert record["status"] == "passed", record
        assert record["figures"]["iters"] == 5
        assert record["path"]["hops"] == 0  # one switch: no router


def test_explicit_pairs_print_the_matrix(switch_lab: str) -> None:
    result = labctl("run", "rping", "--pairs", "node3:node1,node2:node1", "--jobs", "2",
                    "--count", "2", "--lab", switch_lab, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert any("rping rc: server x client" in line for line in lines)
    (row3,) = [line for line in lines if line.startswith("│ node3")]
    assert "passed 2 pings" in row3
    assert "rping rc node3 -> node1: passed" in result.stderr
