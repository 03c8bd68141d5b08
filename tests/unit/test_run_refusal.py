"""Runs that cannot work are refused with the reason before anything starts in a node."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from labctl.runners.examples import EXAMPLES
from labctl.runners.execute import run_example
from labctl.store.labdir import LabDir
from labctl.store.state import LabState, NodeState
from labctl.topology.load import parse_topology, resolve

MIXED = """
name: mixed
nodes:
  roce: {rdma: rxe}
  iwarp: {rdma: siw}
  plain: {rdma: none}
links:
  - endpoints: [roce:eth1, iwarp:eth1, plain:eth1]
"""


class FakeHandle:
    """A LabHandle whose nodes must never be contacted."""

    def __init__(self, tmp_path: Path) -> None:
        self.lab = resolve(parse_topology(MIXED), "mixed.yaml")
        self.labdir = LabDir("mixed", root=tmp_path)
        self.labdir.create(self.lab)
        self.labdir.save_state(LabState(provider="qemu", nodes={
            "roce": NodeState(rdma_dev="rxe0", gid_index=1),
            "iwarp": NodeState(rdma_dev="siw0"),
        }))

    def rdma_device(self, node: str) -> str:
        return self.labdir.load_state().nodes[node].rdma_dev

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the refused run touched the node ({name})")


@pytest.mark.parametrize("key", sorted(EXAMPLES))
def test_roce_and_iwarp_nodes_are_never_paired(tmp_path: Path, key: tuple[str, str]) -> None:
    handle: Any = FakeHandle(tmp_path)
    # packages=(): the workloads' image check (test_workload_packages.py) would refuse first
    result = run_example(handle, dataclasses.replace(EXAMPLES[key], packages=()), "roce",
                         "iwarp", {})
    assert result.status == "skipped"
    assert "RoCE and iWARP" in result.reason


def test_a_node_without_rdma_is_refused_with_a_hint(tmp_path: Path) -> None:
    handle: Any = FakeHandle(tmp_path)
    from labctl.errors import LabctlError

    with pytest.raises(LabctlError, match="node plain has no RDMA device"):
        run_example(handle, EXAMPLES[("pingpong", "rc")], "roce", "plain", {})
