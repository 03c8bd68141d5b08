"""`labctl run ... --pairs`: which node pairs each mode picks (select_pairs, shared by run,
bench and the pytest plugin), which have an IP path, and the refusals."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from labctl.errors import UsageError
from labctl.runners.examples import EXAMPLES
from labctl.runners.execute import RunResult, run_example
from labctl.runners.matrix import run_matrix
from labctl.runners.pairs import (
    check_selection,
    ip_path,
    no_path_reason,
    resolve_pairs,
    select_pairs,
    shared_segment,
)
from labctl.store.labdir import LabDir
from labctl.store.state import LabState, NodeState
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


# --- select_pairs: the user's selection made into pairs --------------------------------------
def test_first_pair_is_the_first_two_rdma_nodes_or_the_ones_named(split: Lab) -> None:
    assert select_pairs(split) == [("node1", "node2")]
    assert select_pairs(split, server="node3") == [("node3", "node1")]
    assert select_pairs(split, server="node2", client="node3") == [("node2", "node3")]
    assert select_pairs(split, "adjacent") == [("node1", "node2")]
    assert select_pairs(split, "node3:node2") == [("node3", "node2")]


@pytest.mark.parametrize(("server", "client", "message", "hint"), [
    ("node9", None, "--server: lab split has no node 'node9'", "nodes: node1, node2, node3, "
     "node4"),
    (None, "node4", "--client: node node4 has no RDMA device (rdma: none)",
     "nodes with RDMA devices: node1, node2, node3"),
    ("node2", "node2", "--server and --client must be different nodes",
     "`labctl status` lists the lab's nodes"),
])
def test_a_bad_first_pair_is_refused_naming_the_flag(split: Lab, server: str | None,
                                                    client: str | None, message: str,
                                                    hint: str | None) -> None:
    with pytest.raises(UsageError) as caught:
        select_pairs(split, server=server, client=client)
    assert (caught.value.message, caught.value.hint) == (message, hint)


def test_the_pytest_plugin_names_its_keywords(split: Lab) -> None:
    with pytest.raises(UsageError, match=r"^server and client must be different nodes$"):
        select_pairs(split, server="node1", client="node1", names=("server", "client"))


def test_a_lab_with_one_rdma_node_has_no_first_pair(tmp_path: Path) -> None:
    path = tmp_path / "one.yaml"
    path.write_text("name: one\nnodes:\n  a: {}\n  b: {rdma: none}\n"
                    "links:\n  - endpoints: [a:eth1, b:eth1]\n")
    with pytest.raises(UsageError) as caught:
        select_pairs(load_lab(path))
    assert (caught.value.message, caught.value.hint) == (
        "this example needs two nodes with RDMA devices",
        "add nodes with rdma: rxe, or pick them with --server/--client")


def test_pairs_that_match_nothing_are_refused() -> None:
    with pytest.raises(UsageError, match=r"^--pairs adjacent: lab routed has no such pair$"):
        select_pairs(shipped("routed"), "adjacent")


@pytest.mark.parametrize(("pairs", "server", "client", "jobs", "message"), [
    ("all", "node1", None, 1, "--server/--client choose the first pair only"),
    ("node1:node2", None, "node2", 1, "--server/--client choose the first pair only"),
    ("first", None, None, 0, "--jobs must be a whole number from 1 to 64 (got 0)"),
    ("first", None, None, True, "--jobs must be a whole number from 1 to 64 (got True)"),
])
def test_a_selection_at_odds_with_itself_is_refused_without_a_lab(
        pairs: str, server: str | None, client: str | None, jobs: int, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        check_selection(pairs, server, client, jobs)
    assert caught.value.message == message


def test_select_pairs_refuses_server_with_pairs_too(split: Lab) -> None:
    with pytest.raises(UsageError, match="choose the first pair only"):
        select_pairs(split, "all", server="node1")


def test_pairs_with_server_is_refused_before_the_lab_opens() -> None:
    result = subprocess.run([sys.executable, "-m", "labctl", "run", "all", "--pairs", "all",
                             "--server", "node1", "--lab", "nosuchlab"], capture_output=True,
                            text=True, cwd=ROOT, timeout=60, check=False)
    assert result.returncode == 2
    assert "--server/--client choose the first pair only" in result.stderr
    assert "Traceback" not in result.stderr


# --- routed labs: IP paths through routers ----------------------------------------------------
def test_routed_lab_pairs_cross_the_router() -> None:
    lab = shipped("routed")
    assert resolve_pairs(lab, "all") == [("node1", "node2")]  # the router has no RDMA
    assert resolve_pairs(lab, "adjacent") == []  # different segments
    assert ip_path(lab, "node1", "node2") == ["router"]
    assert ip_path(lab, "node2", "node1") == ["router"]
    with pytest.raises(UsageError, match="no RDMA device"):
        resolve_pairs(lab, "node1:router")


def test_split_pairs_without_a_path_have_a_reason(split: Lab) -> None:
    assert ip_path(split, "node1", "node2") == []
    assert ip_path(split, "node1", "node3") is None
    assert no_path_reason(split, "node1", "node3") == (
        "no IP path: node1 (10.77.1.1) and node3 (10.77.2.1) have their RDMA devices on "
        "different segments and no routes join them")


class UntouchedHandle:
    """A LabHandle of a lab directory made as `up` makes it, whose nodes must never be
    contacted: a run without an IP path is skipped before anything starts."""

    def __init__(self, lab: Lab, tmp_path: Path) -> None:
        self.lab = lab
        self.labdir = LabDir(lab.name, root=tmp_path)
        self.labdir.create(lab)
        self.labdir.save_state(LabState(provider="qemu", nodes={
            n.name: NodeState(rdma_dev="rxe0", gid_index=1) for n in lab.nodes
            if n.rdma != "none"}))

    def rdma_device(self, node: str) -> str:
        return self.labdir.load_state().nodes[node].rdma_dev

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the skipped run touched a node ({name})")


@pytest.mark.parametrize("key", sorted(EXAMPLES))
def test_a_pair_without_an_ip_path_is_skipped_for_every_example(
        split: Lab, tmp_path: Path, key: tuple[str, str]) -> None:
    handle: Any = UntouchedHandle(split, tmp_path)
    # packages=(): the workloads' image check (test_workload_packages.py) would refuse first
    spec = dataclasses.replace(EXAMPLES[key], packages=())
    result = run_example(handle, spec, "node1", "node3", {})
    assert (result.status, result.path) == ("skipped", None)
    assert result.reason.startswith("no IP path: node1 (10.77.1.1) and node3 (10.77.2.1)")


def test_run_all_lists_every_example_of_a_pathless_pair_as_skipped(
        split: Lab, tmp_path: Path) -> None:
    handle: Any = UntouchedHandle(split, tmp_path)
    results = run_matrix(handle, "node2", "node3", {})
    assert len(results) == len(EXAMPLES)
    assert {r.status for r in results} == {"skipped"}
    assert all(r.reason.startswith("no IP path") for r in results)


@pytest.mark.parametrize("args", [
    ["run", "pingpong", "--pairs", "all", "--server", "node1"],
    ["run", "rping", "--pairs", "node1:node2", "--client", "node2"],
    ["run", "mckey", "--pairs", "all", "--jobs", "0"],
    ["run", "rcopy", "--jobs", "65"],
    ["run", "all", "--pairs", "adjacent", "--jobs", "-1"],
])
def test_pair_flags_are_checked_before_the_lab_opens(args: list[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "labctl", *args, "--lab", "nosuchlab"],
                            capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    assert ("--server/--client choose the first pair only" in result.stderr
            or "--jobs must be a whole number from 1 to 64" in result.stderr), result.stderr
    assert "Traceback" not in result.stderr


def test_every_example_command_takes_pairs_and_jobs() -> None:
    from typer.main import get_command

    from labctl.cli.run import run_app

    group = get_command(run_app)
    commands = group.commands  # type: ignore[attr-defined]
    assert {"pingpong", "rping", "perftest", "mckey", "rdma-server", "udaddy", "ucmatose",
            "cmtime", "rstream", "riostream", "rcopy", "all"} <= set(commands)
    # `list` runs nothing; `ucx-info` and `mpi` run across N nodes, not between pairs;
    # `rdma-core-tests` in each node it is given.
    across_nodes = {"ucx-info", "mpi"}
    for name, command in commands.items():
        options = {o for p in command.params for o in p.opts}
        if name in ("list", "rdma-core-tests"):  # a list; one node's test suite (--node)
            continue
        if name in across_nodes:
            assert "--nodes" in options and "--pairs" not in options, name
            continue
        assert {"--pairs", "--jobs"} <= options, name


@pytest.mark.parametrize("variant", ["ud", "ud-1qp"])
def test_mckey_is_not_run_across_a_router(tmp_path: Path, variant: str) -> None:
    handle: Any = UntouchedHandle(shipped("routed"), tmp_path)
    result = run_example(handle, EXAMPLES[("mckey", variant)], "node1", "node2", {})
    assert result.status == "skipped"
    assert result.reason.startswith("multicast does not cross the lab's routers")
    assert result.path is not None and result.path["routers"] == ["router"]


def test_run_all_skips_the_workloads_the_nodes_image_lacks(tmp_path: Path) -> None:
    """`run all` on the default image: qperf and libfabric are not there, so their entries
    are skipped with the image that has them (a single `run qperf` is refused, exit 2),
    and the rest of the catalogue runs."""
    handle: Any = UntouchedHandle(shipped("two-node"), tmp_path)
    started: list[tuple[str, str]] = []

    def run(handle: Any, spec: Any, server: str, client: str, options: Any) -> RunResult:
        started.append((spec.name, spec.variant))
        return RunResult(spec.name, spec.variant, server, client, "passed")

    results = {(r.example, r.variant): r for r in run_matrix(handle, "node1", "node2", {},
                                                             run=run)}
    workloads = [key for key, spec in EXAMPLES.items() if spec.packages]
    assert sorted(workloads) == [("fabric", "pingpong"), ("qperf", "rdma-tcp")]
    for key in workloads:
        assert results[key].status == "skipped"
        assert results[key].reason.startswith(
            f"{EXAMPLES[key].label}: node node1's image trixie lacks {EXAMPLES[key].packages[0]}"
            " (give the nodes image: trixie-workloads, or packages: [")
        assert key not in started
    assert len(started) == len(EXAMPLES) - len(workloads) - sum(
        r.status == "skipped" for k, r in results.items() if k not in workloads)
