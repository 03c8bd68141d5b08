"""Adding a provider is the three steps of docs/architecture.md ("Adding a provider"): a
record, a Provider subclass, one register() call. This module adds one, `toy`, defined
here and nowhere else, and sees every part of labctl that lists providers take it: the
topology's model and checks, lab.json read back, `up --provider`, the lifecycle's choice
of class, and capture asking the provider where a node's cable ends."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

import labctl.lab.lifecycle as lifecycle
from labctl import capabilities
from labctl.capabilities import QEMU
from labctl.capture.target import CaptureTarget, resolve
from labctl.errors import LabctlError, UsageError
from labctl.lab.handle import LabHandle
from labctl.node.ready import NodeRuntime
from labctl.progress import Progress
from labctl.providers.base import HostLink, Provider
from labctl.store.labdir import LabDir
from labctl.store.state import LabState, NodeState, NodeStatus, Phase
from labctl.store.state_recorder import StateRecorder
from tests.unit.clirun import run_main

LAB = "ut-toy"
NETNS = f"toyns-{LAB}"  # the toy keeps its cables in a namespace of its own naming
TOPOLOGY = f"""\
name: {LAB}
provider: toy
nodes:
  node1: {{}}
  node2: {{}}
links:
  - endpoints: [node1:eth1, node2:eth1]
"""
# Step 1: what a toy lab can do. No routing, so the topology checks refuse routes with
# the toy's own words.
TOY = dataclasses.replace(QEMU, kind="toy", links="toy cables", routing=False,
                          node_setup="the toy's own init", saved_machines=False, netns=False,
                          found_by_name=False)


class ToyProvider(Provider):
    """Step 2: nodes that are entries of a class attribute; each step says what it did."""

    capabilities = TOY
    did: ClassVar[list[str]] = []
    running: ClassVar[set[str]] = set()

    def check_host(self) -> None:
        self.did.append("check_host")

    def create(self, record: StateRecorder, progress: Progress) -> None:
        for node in self.lab.nodes:
            record.node(node.name, NodeState(pid=4000 + node.index))
            self.running.add(node.name)
        self.did.append("create")

    def wait_ready(self, state: LabState, timeout: float, progress: Progress,
                   nodes: list[str] | None = None) -> None:
        for name in nodes or list(state.nodes):
            state.nodes[name].port_state = "ACTIVE"
        self.did.append("wait_ready")

    def nodes(self) -> list[NodeRuntime]:
        return [NodeRuntime(n.name, NodeStatus.RUNNING if n.name in self.running
                            else NodeStatus.STOPPED) for n in self.lab.nodes]

    def host_link(self, state: LabState, node: str, ifname: str) -> HostLink:
        return HostLink(f"toy{self.lab.node(node).index}-{ifname}", "toy cable", NETNS)

    def set_link_state(self, node: str, ifname: str, up: bool) -> None:
        self.did.append(f"link {node}:{ifname} {'up' if up else 'down'}")

    def destroy(self) -> list[str]:
        self.did.append("destroy")
        gone = sorted(self.running)
        self.running.clear()
        return [f"toy node {name}" for name in gone]

    def exec_argv(self, node: str, command: list[str], *, tty: bool = False) -> list[str]:
        return ["true"]


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Step 3: the toy registered (and only for this test); its topology file."""
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "labs"))
    monkeypatch.setattr(ToyProvider, "did", [])
    monkeypatch.setattr(ToyProvider, "running", set())
    capabilities.register("toy", TOY, f"{__name__}:ToyProvider", "toys")
    topology = tmp_path / "toy.yaml"
    topology.write_text(TOPOLOGY)
    try:
        yield topology
    finally:
        capabilities.unregister("toy")


def test_the_topology_takes_the_registered_provider(
        toy: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(monkeypatch, capsys, "validate", "--json", str(toy))
    assert (code, err) == (0, "")
    assert '"provider": "toy"' in out
    toy.write_text(TOPOLOGY.replace("provider: toy", "provider: tyo"))
    code, out, err = run_main(monkeypatch, capsys, "validate", str(toy))
    assert code == 2
    assert f"{toy}:2: provider: must be one of qemu, docker, vagrant, toy (got 'tyo')" in err
    assert "hint: did you mean 'toy'? (use one of: qemu, docker, vagrant, toy)" in err


def test_the_topology_checks_read_the_registered_record(
        toy: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    toy.write_text(TOPOLOGY.replace("  node1: {}", "  node1: {routes: [{to: 10.9.0.0/24, "
                                                   "via: 10.77.1.2}]}"))
    code, _, err = run_main(monkeypatch, capsys, "validate", str(toy))
    assert code == 2
    assert ("routers and routes are not supported with provider toy (its nodes are set up "
            "by the toy's own init)") in " ".join(err.split())
    assert "hint: use provider qemu or docker for a routed lab" in err


def test_up_with_the_provider_option_takes_it() -> None:
    capabilities.register("toy", TOY, f"{__name__}:ToyProvider", "toys")
    try:
        lifecycle.UpOptions(provider="toy").check()
        with pytest.raises(UsageError) as info:
            lifecycle.UpOptions(provider="toys").check()
        assert info.value.message == ("--provider must be qemu, docker, vagrant or toy "
                                      "(got 'toys')")
    finally:
        capabilities.unregister("toy")
    with pytest.raises(UsageError, match=r"must be qemu, docker or vagrant \(got 'toy'\)"):
        lifecycle.UpOptions(provider="toy").check()


def test_the_lifecycle_makes_and_removes_a_lab_of_it(toy: Path) -> None:
    result = lifecycle.up(toy)
    assert ToyProvider.did == ["check_host", "create", "wait_ready"]
    state = result.labdir.load_state()
    assert (state.provider, state.phase, state.netns) == ("toy", Phase.UP, "")
    assert {n: s.port_state for n, s in state.nodes.items()} == {
        "node1": "ACTIVE", "node2": "ACTIVE"}
    # lab.json read back (checked as a topology is) gets the toy's class again
    handle = LabHandle(LabDir(LAB))
    assert type(handle.provider) is ToyProvider and handle.lab.provider == "toy"
    # what it does not implement, the base class refuses in its record's words
    ToyProvider.running.discard("node2")
    with pytest.raises(UsageError) as info:
        lifecycle.repair(result.labdir, 10)
    assert info.value.message == "the toy provider cannot restart nodes in place"
    assert lifecycle.destroy(LAB) == [
        "toy node node1", f"lab directory {result.labdir.path}"]
    assert ToyProvider.did[-1] == "destroy" and not result.labdir.path.exists()


@pytest.fixture
def toy_netns() -> Iterator[str]:
    """The toy's namespace on this host, with node1's cable end in it."""
    from pyroute2 import IPRoute, netns

    if NETNS in netns.listnetns():
        netns.remove(NETNS)
    netns.create(NETNS)
    try:
        with IPRoute(netns=NETNS) as ipr:
            ipr.link("add", ifname="toy1-eth1", kind="veth", peer="peer1")
        yield NETNS
    finally:
        netns.remove(NETNS)


def test_capture_asks_the_provider_where_a_cable_ends(toy: Path, toy_netns: str) -> None:
    lifecycle.up(toy)
    handle = LabHandle(LabDir(LAB))
    assert resolve(handle, "node1", "eth1") == CaptureTarget(
        "node1", "eth1", toy_netns, "toy1-eth1")
    with pytest.raises(LabctlError) as info:
        resolve(handle, "node2", "eth1")
    assert info.value.message == f"node2:eth1 has no toy cable toy2-eth1 in {toy_netns}"
    lifecycle.destroy(LAB)
