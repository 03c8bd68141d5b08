"""labctl's packages form layers, and a package imports only from the layers below it.

From the bottom: neutral helpers (errors, bounded reads, paths, locks, progress, test
fault points, provider capabilities, data, host networking, and the code that runs outside
labctl's process: in the nodes, or beside a docker lab's engine) that every layer may use;
the wire formats (pure decoders); the topology (pure: files in, a resolved Lab out); the
lab directory and its state (store); images; what labctl gives and reads back from a node
(node); a qemu machine (vm); the Docker engines (dockerhost); the providers; the lab
service (handle, lifecycle, counters); RDMA-aware faults; the runners; live capture; and on
top the CLI and the pytest plugin. The CLI reaches labs through the lab service only: it
imports nothing between the topology and lab/ but the doors listed, each with its reason.
docs/architecture.md says the same.
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


# The CLI's door to a lab is the lab service (lab/) and the services above it (faults,
# runners, capture); besides them it reads the topology model, prints with the wire
# formatters, and uses the neutral helpers (errors, bounded output, progress...). The parts
# between the model and the lab service are the service's own business, as is the lab's
# network namespace:
BEHIND_THE_LAB_SERVICE = frozenset({"store", "images", "node", "vm", "dockerhost",
                                    "providers", "net"})
# ...but for these, each with its reason: (CLI module, part) -> why it goes there directly.
CLI_OWN_DOORS: dict[tuple[str, str], str] = {
    ("labctl.cli.image", "images"): "`labctl image` manages the image cache: no lab's",
    ("labctl.cli.image", "vm"): "`labctl image list/prune` lists and prunes saved machines, "
    "shared by labs, none's",
    ("labctl.cli.doctor", "images"): "`labctl doctor` checks this host before any lab "
    "exists: which images are cached",
    ("labctl.cli.doctor", "vm"): "`labctl doctor`: whether KVM works here",
    ("labctl.cli.doctor", "dockerhost"): "`labctl doctor`: whether a Docker engine answers "
    "(local, or in the Docker host VM)",
    ("labctl.cli.docker_host", "dockerhost"): "`labctl docker-host` manages the Docker host "
    "VM, which labs share and which is no lab",
    ("labctl.cli.docker_host", "node"): "`labctl docker-host ssh` logs into that VM",
    ("labctl.cli.docker_host", "store"): "`labctl docker-host down` names the labs whose "
    "containers run in the VM (their state's engine)",
    ("labctl.cli.validate", "providers"): "`validate --vagrant` prints the Vagrant plan, a "
    "pure document the Vagrant provider owns",
    ("labctl.cli.schemas", "providers"): "the JSON Schema of that plan (docs/json/)",
    ("labctl.cli.graph", "store"): "`graph -o FILE` writes the file as state files are "
    "written (atomic_write: never half a file)",
    ("labctl.cli.kernel", "images"): "`labctl kernel config DIR` edits a kernel tree's "
    ".config with the options nodes need: no lab's",
}


def cli_going_around(graph: dict[str, set[str]]) -> list[str]:
    """Each import from the CLI to a part behind the lab service, not one of its own doors."""
    return [f"{s} -> {t}" for s, t in crossings(graph)
            if part(s) == "cli" and part(t) in BEHIND_THE_LAB_SERVICE
            and (s, part(t)) not in CLI_OWN_DOORS]


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


def test_the_cli_goes_through_the_lab_service() -> None:
    assert cli_going_around(import_graph()) == []


def test_every_door_of_the_cli_s_own_is_still_used() -> None:
    """An exception whose import is gone is dropped from the list, not kept as a licence."""
    graph = import_graph()
    used = {(s, part(t)) for s, t in crossings(graph)}
    assert [door for door in CLI_OWN_DOORS if door not in used] == []


def test_the_check_reports_the_cli_going_around() -> None:
    graph = {"labctl.cli.status": {"labctl.store.labdir", "labctl.lab.status"},
             "labctl.cli.image": {"labctl.images.cache", "labctl.node.ssh"},
             "labctl.cli.up": {"labctl.topology.load", "labctl.errors", "labctl.net.labnet"}}
    assert cli_going_around(graph) == ["labctl.cli.image -> labctl.node.ssh",
                                       "labctl.cli.status -> labctl.store.labdir",
                                       "labctl.cli.up -> labctl.net.labnet"]


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
