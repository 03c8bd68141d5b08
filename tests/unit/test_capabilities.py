"""The capability table (labctl/capabilities.py) is what the providers do, and the only
place outside labctl/providers that tells providers apart."""

from __future__ import annotations

import ast
import dataclasses
import typing
from pathlib import Path

import pytest

from labctl import capabilities
from labctl.capabilities import BY_PROVIDER, DOCKER, QEMU, SWARM, VAGRANT, Capabilities
from labctl.providers import provider_for
from labctl.providers.base import Provider, UnsupportedError
from labctl.providers.docker import DockerProvider
from labctl.providers.docker_swarm import SwarmProvider
from labctl.providers.qemu import QemuProvider
from labctl.providers.vagrant import VagrantProvider
from labctl.store.labdir import LabDir
from labctl.topology import model
from labctl.topology.resolved import Lab

PACKAGE = Path(capabilities.__file__).parent
CLASSES: list[tuple[type[Provider], Capabilities]] = [
    (QemuProvider, QEMU), (DockerProvider, DOCKER), (SwarmProvider, SWARM),
    (VagrantProvider, VAGRANT)]
# Where a provider's name may still be written outside labctl/providers: the table itself,
# the Docker host VM (a qemu lab of its own), doctor's host checks and the JSON shapes.
NAMED_PROVIDERS_ALLOWED = {"capabilities.py", "dockerhost/vm.py", "cli/doctor.py",
                           "cli/shapes.py", "topology/model.py", "dockerhost/sdk.py"}


@pytest.mark.parametrize(("cls", "caps"), CLASSES, ids=lambda c: getattr(c, "__name__", ""))
def test_each_provider_class_carries_its_record(cls: type[Provider],
                                                caps: Capabilities) -> None:
    assert cls.capabilities is caps


@pytest.mark.parametrize(("cls", "caps"), CLASSES, ids=lambda c: getattr(c, "__name__", ""))
def test_a_capability_is_there_exactly_when_the_class_implements_it(
        cls: type[Provider], caps: Capabilities) -> None:
    """The base class refuses link set, repair and stop: a provider that says it can do
    one overrides it, one that says it cannot leaves the refusal."""
    for method, can in (("set_link_state", caps.link_set), ("repair", caps.repair),
                        ("stop_node", caps.node_stop)):
        overridden = getattr(cls, method) is not getattr(Provider, method)
        assert overridden is can, f"{cls.__name__}.{method}"


def test_the_topologys_provider_names_are_the_tables() -> None:
    assert typing.get_args(model.Provider) == capabilities.PROVIDERS == model.PROVIDERS
    assert capabilities.PROVIDERS == ("qemu", "docker", "vagrant")
    assert capabilities.offering("hosts") == ["docker"]
    assert capabilities.offering("link_set") == ["qemu", "docker"]
    assert [name for name, caps in BY_PROVIDER.items() if caps.found_by_name] == [
        "qemu", "docker"]


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


def test_records_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        QEMU.repair = False  # type: ignore[misc]


def _named_provider_comparisons(path: Path) -> list[int]:
    """Lines of `path` that compare something with a provider's name."""
    names = set(capabilities.PROVIDERS)
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
