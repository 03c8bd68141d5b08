"""labctl's packages form layers, and a package imports only from the layers below it.

From the bottom: neutral helpers (errors, bounded reads, paths, locks, progress, test
fault points, provider capabilities, data, host networking, and the code that runs outside
labctl's process: in the nodes, or beside a docker lab's engine) that every layer may use;
the wire formats (pure decoders); the topology (pure: files in, a resolved Lab out); the
lab directory and its state (store); images; what labctl gives and reads back from a node
(node); a qemu machine (vm); the Docker engines (dockerhost); the providers; the lab
service (handle, lifecycle, counters); RDMA-aware faults; the runners; live capture; and on
top the CLI and the pytest plugin. docs/architecture.md says the same.
A module-level view of the same graph (no cycles) is tests/unit/test_import_graph.py.
"""

from __future__ import annotations

import ast
import sys

import pytest

from tests.unit.test_import_graph import PACKAGE, import_graph

NEUTRAL = 0
# The rank of each part of labctl: a part may import parts of lower rank, and NEUTRAL
# parts import only NEUTRAL ones.
LAYERS: dict[str, int] = {
    "labctl": NEUTRAL, "errors": NEUTRAL, "bounded": NEUTRAL, "paths": NEUTRAL,
    "locks": NEUTRAL, "safefs": NEUTRAL, "progress": NEUTRAL, "testpoints": NEUTRAL,
    "data": NEUTRAL, "net": NEUTRAL, "nodeside": NEUTRAL, "engineside": NEUTRAL,
    "verbs": NEUTRAL, "capabilities": NEUTRAL, "hostproc": NEUTRAL,
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
    "course": 13,
    "cli": 14, "pytest_plugin": 14,
    "__main__": 15,
}
# Code that runs outside labctl's process, and what it may import besides the standard library
# and its own part of labctl: what the node image has (pyverbs, mpi4py), and in the Docker
# host VM (or as root beside a local engine) nothing at all.
OUTSIDE: dict[str, frozenset[str]] = {
    "nodeside": frozenset({"pyverbs", "mpi4py"}),
    "verbs": frozenset({"pyverbs"}),
    "engineside": frozenset(),
}
# Files sent as text to a python3 on stdin: nothing but the file reaches the other machine.
SENT_AS_TEXT = ("labctl.nodeside.faultgate", "labctl.engineside.dockernet",
                "labctl.engineside.vmcapture")


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


@pytest.mark.parametrize("outside", OUTSIDE)
def test_code_run_outside_imports_nothing_else_of_labctl(outside: str) -> None:
    # labctl/__init__.py only names the version: shipped to nodes with this code
    wrong = [f"{s} -> {t}" for s, t in crossings(import_graph())
             if part(s) == outside and part(t) != "labctl"]
    assert wrong == []


def test_files_sent_as_text_import_no_labctl_module() -> None:
    graph = import_graph()
    assert {name: graph[name] for name in SENT_AS_TEXT} == {name: set() for name in SENT_AS_TEXT}


def foreign_imports(source: str, allowed: frozenset[str]) -> list[str]:
    """The modules `source` imports (anywhere) that are neither the standard library, nor
    labctl, nor in `allowed`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append(node.module)
    known = sys.stdlib_module_names | allowed | {"labctl"}
    return [name for name in found if name.partition(".")[0] not in known]


@pytest.mark.parametrize("outside", OUTSIDE)
def test_code_run_outside_imports_only_the_standard_library(outside: str) -> None:
    wrong = {str(path.relative_to(PACKAGE)): found
             for path in sorted((PACKAGE / outside).rglob("*.py"))
             if (found := foreign_imports(path.read_text(), OUTSIDE[outside]))}
    assert wrong == {}


def test_the_check_reports_imports_beyond_the_standard_library() -> None:
    source = ("import os, yaml\nfrom pyverbs.device import Context\n"
              "def f():\n    from rich import table\n    from . import sibling\n")
    assert foreign_imports(source, frozenset()) == ["yaml", "pyverbs.device", "rich"]
    assert foreign_imports(source, frozenset({"pyverbs"})) == ["yaml", "rich"]


def test_the_check_reports_imports_up_and_across() -> None:
    graph = {"labctl.providers.qemu": {"labctl.lab.handle", "labctl.vm.machine"},
             "labctl.cli.run": {"labctl.pytest_plugin.session", "labctl.errors"},
             "labctl.topology.checks": {"labctl.topology.model"}}
    assert upward_imports(graph) == ["labctl.cli.run -> labctl.pytest_plugin.session",
                                     "labctl.providers.qemu -> labctl.lab.handle"]
