"""The registry (labctl/capabilities.py) is what the providers do, and the only place
outside labctl/providers that tells providers apart."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from labctl import capabilities
from labctl.capabilities import DOCKER, QEMU, SWARM, VAGRANT, Capabilities
from labctl.errors import LabctlError
from labctl.providers import provider_for
from labctl.providers.base import HOST, VM, HostLink, Provider, UnsupportedError
from labctl.providers.docker import DockerProvider
from labctl.providers.docker_swarm import SwarmProvider
from labctl.providers.qemu import QemuProvider
from labctl.providers.vagrant import VagrantProvider
from labctl.store.labdir import LabDir
from labctl.store.state import EngineState, LabState
from labctl.topology.load import load_lab
from labctl.topology.resolved import Lab

PACKAGE = Path(capabilities.__file__).parent
CLASSES: list[tuple[type[Provider], Capabilities]] = [
    (QemuProvider, QEMU), (DockerProvider, DOCKER), (SwarmProvider, SWARM),
    (VagrantProvider, VAGRANT)]
# Where a provider's name may still be written outside labctl/providers: the table itself,
# the Docker host VM (a qemu lab of its own) and the JSON shapes (doctor reads the registry).
NAMED_PROVIDERS_ALLOWED = {"capabilities.py", "dockerhost/vm.py",
                           "cli/shapes.py", "topology/model.py", "dockerhost/sdk.py"}


@pytest.mark.parametrize(("cls", "caps"), CLASSES, ids=lambda c: getattr(c, "__name__", ""))
def test_each_provider_class_carries_its_record(cls: type[Provider],
                                                caps: Capabilities) -> None:
    assert cls.capabilities is caps


@pytest.mark.parametrize(("cls", "caps"), CLASSES, ids=lambda c: getattr(c, "__name__", ""))
def test_a_capability_is_there_exactly_when_the_class_implements_it(
        cls: type[Provider], caps: Capabilities) -> None:
    """The base class refuses link set and the lab's side of a link: a provider that says
    it holds the cables overrides both, one that says it does not leaves the refusals."""
    for method in ("set_link_state", "host_link"):
        overridden = getattr(cls, method) is not getattr(Provider, method)
        assert overridden is caps.host_links, f"{cls.__name__}.{method}"


def test_the_registry_lists_the_providers() -> None:
    assert capabilities.providers() == ("qemu", "docker", "vagrant")
    assert capabilities.offering("hosts") == ["docker"]
    assert capabilities.offering("link_set") == ["qemu", "docker"]
    assert capabilities.offering("found_by_name") == ["qemu", "docker"]
    assert capabilities.either(["qemu", "docker", "vagrant"]) == "qemu, docker or vagrant"
    assert capabilities.either(["qemu"]) == "qemu"
    with pytest.raises(ValueError, match="'qemu' is already registered"):
        capabilities.register("qemu", VAGRANT, "labctl.providers.vagrant:VagrantProvider", "")
    assert capabilities.for_provider("qemu") is QEMU


@pytest.mark.parametrize(("name", "cls"), [
    ("qemu", QemuProvider), ("docker", DockerProvider), ("vagrant", VagrantProvider)])
def test_each_registered_factory_makes_the_class_with_the_registered_record(
        name: str, cls: type[Provider]) -> None:
    provider = provider_for(Lab("ut-caps", name, "", (), ()), LabDir("ut-caps"))
    assert type(provider) is cls
    assert provider.capabilities is capabilities.for_provider(name)


@pytest.mark.parametrize(("placement", "cls"), [
    ({}, DockerProvider),
    ({"node1": "a", "node2": "a"}, DockerProvider),  # one host: the single-engine provider
    ({"node1": "a", "node2": "b"}, SwarmProvider),
])
def test_a_docker_lab_on_several_hosts_gets_the_swarm_provider(
        placement: dict[str, str], cls: type[Provider]) -> None:
    lab = Lab("ut-caps", "docker", "", (), (), provider_options={"placement": placement})
    provider = provider_for(lab, LabDir("ut-caps"))
    assert type(provider) is cls and provider.name == "docker"


def test_refusals_say_what_the_links_are() -> None:
    lab = Lab("ut-caps", "vagrant", "", (), ())
    provider = provider_for(lab, LabDir("ut-caps"))
    with pytest.raises(UnsupportedError) as info:
        provider.set_link_state("node1", "eth1", False)
    assert info.value.exit_code == 2
    assert info.value.message == ("link set is not supported for vagrant labs: their links "
                                  "are the hypervisor's own networks (VirtualBox or libvirt)")
    assert "labctl exec node1 -- ip link set eth1 down" in (info.value.hint or "")
    with pytest.raises(UnsupportedError) as info:
        provider.host_link(LabState(provider="vagrant"), "node1", "eth1")
    assert info.value.message == ("the lab's side of a link is not supported for vagrant "
                                  "labs: their links are the hypervisor's own networks "
                                  "(VirtualBox or libvirt)")
    assert "labctl exec node1 -- ip link show eth1" in (info.value.hint or "")


TWO_NODE = Path(__file__).resolve().parents[2] / "topologies" / "two-node.yaml"


def test_a_qemu_nodes_link_end_is_its_tap_in_the_labs_namespace_here() -> None:
    lab = load_lab(TWO_NODE)
    provider = provider_for(lab, LabDir(lab.name))
    link = provider.host_link(LabState(provider="qemu"), "node2", "eth1")
    assert link == HostLink("t2-eth1", "tap", "labctl-two-node", HOST)


@pytest.mark.parametrize(("engine", "where"), [
    (EngineState("vm", "unix:///run/labctl/docker.sock"), VM),
    (EngineState("local", "unix:///var/run/docker.sock"), HOST),
])
def test_a_container_nodes_link_end_is_its_veth_where_its_engine_runs(
        engine: EngineState, where: str) -> None:
    lab = dataclasses.replace(load_lab(TWO_NODE), provider="docker")
    provider = provider_for(lab, LabDir(lab.name))
    link = provider.host_link(LabState(provider="docker", engine=engine), "node1", "eth1")
    assert link == HostLink("v1-eth1", "veth", "labctl-two-node", where)


def test_a_docker_lab_without_an_engine_has_no_link_end_to_show() -> None:
    lab = dataclasses.replace(load_lab(TWO_NODE), provider="docker")
    provider = provider_for(lab, LabDir(lab.name))
    with pytest.raises(LabctlError) as info:
        provider.host_link(LabState(provider="docker"), "node1", "eth1")
    assert info.value.message == "lab two-node has no engine recorded"
    assert info.value.hint == "is the lab up? see `labctl status`"


def test_records_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        QEMU.netns = False  # type: ignore[misc]


def _named_provider_comparisons(path: Path) -> list[int]:
    """Lines of `path` that compare something with a provider's name."""
    names = set(capabilities.providers())
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for operand in operands:
                values = operand.elts if isinstance(operand, ast.Tuple | ast.List | ast.Set) \
                    else [operand]
                if any(isinstance(v, ast.Constant) and v.value in names for v in values):
                    lines.append(node.lineno)
    return lines


def test_no_layer_but_the_providers_switches_on_a_providers_name() -> None:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("providers/") or rel in NAMED_PROVIDERS_ALLOWED:
            continue
        if lines := _named_provider_comparisons(path):
            found[rel] = lines
    assert found == {}
