"""`labctl run all --pairs`: which node pairs each mode picks, and the refusals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from labctl.errors import UsageError
from labctl.runners.pairs import resolve_pairs, shared_segment
from labctl.topology.load import load_lab
from labctl.topology.resolved import Lab

ROOT = Path(__file__).resolve().parents[2]

# node1 and node2 share link1 (their RDMA interface, eth1); node3's RDMA interface is on
# link2 with node4 (rdma: none); node2's second interface is on link2 too.
SPLIT = """
name: split
nodes:
  node1: {}
  node2: {}
  node3: {}
  node4: {rdma: none}
links:
  - endpoints: [node1:eth1, node2:eth1]
  - endpoints: [node3:eth1, node4:eth1, node2:eth2]
"""


def shipped(name: str) -> Lab:
    return load_lab(ROOT / "topologies" / f"{name}.yaml")


@pytest.fixture()
def split(tmp_path: Path) -> Lab:
    path = tmp_path / "split.yaml"
    path.write_text(SPLIT)
    return load_lab(path)


def test_switch_adjacent_is_every_pair() -> None:
    lab = shipped("three-node-switch")
    expected = [("node1", "node2"), ("node1", "node3"), ("node2", "node3")]
    assert resolve_pairs(lab, "adjacent") == resolve_pairs(lab, "all") == expected


def test_two_node_has_one_pair() -> None:
    assert resolve_pairs(shipped("two-node"), "adjacent") == [("node1", "node2")]


def test_split_segments(split: Lab) -> None:
    assert resolve_pairs(split, "adjacent") == [("node1", "node2")]
    # all: every RDMA pair; node3 shares no segment with the others' RDMA interfaces
    assert resolve_pairs(split, "all") == [("node1", "node2"), ("node1", "node3"),
                                           ("node2", "node3")]
    assert not shared_segment(split, "node1", "node3")
    assert not shared_segment(split, "node2", "node3")  # node2's device is on eth1


def test_explicit_pairs_keep_their_order(split: Lab) -> None:
    assert resolve_pairs(split, "node2:node1, node1:node2") == [("node2", "node1"),
                                                                ("node1", "node2")]


@pytest.mark.parametrize(("spec", "message"), [
    ("node1", "is not NODE:NODE"),
    ("node1:", "is not NODE:NODE"),
    ("node1:node9", "has no node"),
    ("node1:node4", "no RDMA device"),
    ("node1:node1", "with itself"),
    ("node1:node2,node1:node2", "given twice"),
])
def test_bad_pairs_are_refused(split: Lab, spec: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        resolve_pairs(split, spec)


def test_pairs_with_server_is_refused_before_the_lab_opens() -> None:
    result = subprocess.run([sys.executable, "-m", "labctl", "run", "all", "--pairs", "all",
                             "--server", "node1", "--lab", "nosuchlab"], capture_output=True,
                            text=True, cwd=ROOT, timeout=60, check=False)
    assert result.returncode == 2
    assert "--server/--client choose the first pair only" in result.stderr
    assert "Traceback" not in result.stderr
