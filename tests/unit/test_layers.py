"""labctl's packages form layers, and a package imports only from the layers below it.

From the bottom: neutral helpers (errors, bounded reads, paths, locks, progress, test
fault points, provider capabilities, data, host networking, and the node-side code) that
every layer may use; the wire formats (pure decoders); the topology (pure: files in, a
resolved Lab out); the lab directory and its state (store); images; what labctl gives and
reads back from a node (node); a qemu machine (vm); the Docker engines (dockerhost); the
providers; the lab service (handle, lifecycle); RDMA-aware faults; the runners; live
capture; and on top the CLI and the pytest plugin. docs/architecture.md says the same.
A module-level view of the same graph (no cycles) is tests/unit/test_import_graph.py.
"""

from __future__ import annotations

import pytest

from tests.unit.test_import_graph import import_graph

NEUTRAL = 0
# The rank of each part of labctl: a part may import parts of lower rank, and NEUTRAL
# parts import only NEUTRAL ones.
LAYERS: dict[str, int] = {
    "labctl": NEUTRAL, "errors": NEUTRAL, "bounded": NEUTRAL, "paths": NEUTRAL,
    "locks": NEUTRAL, "safefs": NEUTRAL, "progress": NEUTRAL, "faults": NEUTRAL, "data": NEUTRAL,
    "net": NEUTRAL, "nodeside": NEUTRAL, "verbs": NEUTRAL, "capabilities": NEUTRAL,
    "hostproc": NEUTRAL,
    "wire": 1,
    "topology": 2,
    "store": 3,
    "images": 4,
    "node": 5,
    "vm": 6,
    "dockerhost": 7,
    "providers": 8,
    "lab": 9,
    "rdmafault": 10,
    "runners": 11,
    "capture": 12,
    "cli": 13, "pytest_plugin": 13,
    "__main__": 14,
}
# Code that runs inside the nodes (stdlib and pyverbs only) imports nothing else of labctl.
NODE_SIDE = ("nodeside", "verbs")


def part(module: str) -> str:
    """labctl.lab.handle -> lab; labctl.errors -> errors; labctl -> labctl."""
    return module.split(".")[1] if "." in module else module


def crossings(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((source, target) for source, targets in graph.items()
                  for target in targets if part(source) != part(target))


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import from a part to one of the same or a higher layer (neutral ones aside)."""
    return [f"{s} -> {t}" for s, t in crossings(graph)
            if LAYERS[part(t)] > LAYERS[part(s)]
            or LAYERS[part(s)] == LAYERS[part(t)] != NEUTRAL]


def test_every_part_of_labctl_has_a_layer() -> None:
    parts = {part(m) for m in import_graph()}
    assert parts - set(LAYERS) == set(), "give each new package a rank in LAYERS"


def test_imports_go_down_the_layers_only() -> None:
    assert upward_imports(import_graph()) == []


def test_neutral_parts_import_only_neutral_ones() -> None:
    wrong = [f"{s} -> {t}" for s, t in crossings(import_graph())
             if LAYERS[part(s)] == NEUTRAL and LAYERS[part(t)] != NEUTRAL]
    assert wrong == []


@pytest.mark.parametrize("node_side", NODE_SIDE)
def test_node_side_code_imports_nothing_else_of_labctl(node_side: str) -> None:
    # labctl/__init__.py only names the version: shipped to nodes with this code
    wrong = [f"{s} -> {t}" for s, t in crossings(import_graph())
             if part(s) == node_side and part(t) != "labctl"]
    assert wrong == []


def test_the_check_reports_imports_up_and_across() -> None:
    graph = {"labctl.providers.qemu": {"labctl.lab.handle", "labctl.vm.machine"},
             "labctl.cli.run": {"labctl.pytest_plugin.session", "labctl.errors"},
             "labctl.topology.checks": {"labctl.topology.model"}}
    assert upward_imports(graph) == ["labctl.cli.run -> labctl.pytest_plugin.session",
                                     "labctl.providers.qemu -> labctl.lab.handle"]
