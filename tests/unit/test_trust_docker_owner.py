"""Lab names are unique per state directory only; a Docker engine (a local one, the hosts of
a swarm) may serve labs of several. What labctl made in an engine carries its owner (the
digest of its lab directory's path), and status and down take only their own."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from labctl.engineside import dockernet
from labctl.net import labnet
from labctl.providers.docker import DockerProvider
from labctl.providers.labels import lab_labels, owned_by
from labctl.store.labdir import LabDir
from labctl.topology.load import load_lab

REPO = Path(__file__).resolve().parents[2]


def test_an_object_is_its_owners_or_an_older_labctls() -> None:
    mine, theirs = "labctl-owner:" + "a" * 32, "labctl-owner:" + "b" * 32
    assert owned_by(lab_labels("x", mine), "x", mine)
    assert not owned_by(lab_labels("x", theirs), "x", mine)
    assert not owned_by(lab_labels("y", mine), "x", mine)
    assert owned_by({"labctl": "1", "labctl.lab": "x"}, "x", mine)  # before owners
    assert not owned_by(None, "x", mine) and not owned_by({}, "x", mine)


class _Containers:
    """The part of the SDK's `client.containers` the provider reads: list() filtered by a
    label, each container with its `labels` dict and its `name`."""

    def __init__(self, found: list[Any]) -> None:
        self.found = found
        self.filters: list[dict[str, str]] = []

    def list(self, all: bool, filters: dict[str, str]) -> list[Any]:
        self.filters.append(filters)
        key, _, value = filters["label"].partition("=")
        return [c for c in self.found if c.labels.get(key) == value]


def test_a_lab_sees_only_its_own_containers_in_a_shared_engine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "state"))
    lab = dataclasses.replace(load_lab(REPO / "topologies/docker-two-node.yaml"), name="x")
    labdir = LabDir("x")
    labdir.create(lab)
    provider = DockerProvider(lab, labdir)
    other = labnet.owner_mark(tmp_path / "other-state" / "x")
    assert provider.owner == labnet.owner_mark(labdir.path) != other

    def container(name: str, node: str, owner: str | None) -> Any:
        labels = lab_labels("x", owner or "") | {"labctl.node": node}
        if owner is None:
            del labels["labctl.owner"]
        return SimpleNamespace(name=name, labels=labels)

    found = [container("ours", "node1", provider.owner),
             container("older", "node2", None),
             container("theirs", "node1", other)]
    containers = _Containers(found)
    assert {n: c.name for n, c in provider._containers(
        SimpleNamespace(containers=containers)).items()} == {"node1": "ours", "node2": "older"}
    assert containers.filters == [{"label": "labctl.lab=x"}]


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_the_engine_side_netns_of_another_state_dir_is_kept() -> None:
    """dockernet.py (run beside the engine) marks the lab's netns with its owner at
    `plumb`, and `teardown` with another owner leaves it."""
    ns = f"labctl-ut-dn{os.getpid() % 100000}"
    mine, theirs = "labctl-owner:" + "a" * 32, "labctl-owner:" + "b" * 32
    subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False, timeout=30)
    try:
        assert dockernet.plumb({"netns": ns, "bridges": [], "veths": [], "owner": mine}) == {
            "netns": ns, "veths": []}
        assert dockernet.owner_of(ns) == mine
        assert dockernet.teardown(ns, theirs) == {
            "removed": [], "kept": f"netns {ns} (a lab of another state directory)"}
        assert ns in dockernet.netns_list()
        assert dockernet.teardown(ns, mine) == {"removed": [f"netns {ns}"]}
        assert ns not in dockernet.netns_list()
        # made by an older labctl (no mark): removed by the lab of that name
        dockernet.plumb({"netns": ns, "bridges": [], "veths": []})
        assert dockernet.owner_of(ns) == ""
        assert dockernet.teardown(ns, mine) == {"removed": [f"netns {ns}"]}
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False, timeout=30)


# --- the Docker hosts' network: its index files and its netns ---------------------------

@pytest.fixture
def hosts_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "state"))
    from labctl.paths import docker_hosts_root

    root = docker_hosts_root()
    (root / "docker-host-a").mkdir(parents=True)
    return root


@pytest.mark.parametrize("content", [b"0\n", b"201\n", b"-3", b"1e3", b"7" * 40, b"", b"x\n"])
def test_an_index_file_that_is_not_an_index_counts_as_none(hosts_root: Path,
                                                           content: bytes) -> None:
    from labctl.dockerhost import hostnet

    (hosts_root / "docker-host-a" / hostnet.INDEX_FILE).write_bytes(content)
    assert hostnet.recorded_index(hosts_root / "docker-host-a") == 0


def test_an_index_file_is_read_through_no_link(hosts_root: Path, tmp_path: Path) -> None:
    from labctl.dockerhost import hostnet

    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("5\n")
    (hosts_root / "docker-host-a" / hostnet.INDEX_FILE).symlink_to(elsewhere)
    assert hostnet.recorded_index(hosts_root / "docker-host-a") == 0
    (hosts_root / "docker-host-a" / hostnet.INDEX_FILE).unlink()
    (hosts_root / "docker-host-a" / hostnet.INDEX_FILE).write_text("5\n")
    assert hostnet.recorded_index(hosts_root / "docker-host-a") == 5


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_the_hosts_network_of_another_state_dir_is_refused_and_kept(
        hosts_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hosts' netns is one per machine, the VMs' indexes one per state dir: a second
    state dir attaching to it is refused (its index 1 would be the first one's tap), and
    its release leaves the first one's netns. An index file planted as a link is replaced,
    never written through."""
    from labctl.dockerhost import hostnet
    from labctl.errors import LabctlError

    ns = f"labctl-ut-hn{os.getpid() % 100000}"
    monkeypatch.setattr(hostnet, "NETNS", ns)
    labnet.delete_netns(ns)
    victim = tmp_path / "victim"
    victim.write_text("host file\n")
    vm = hosts_root / "docker-host-a"
    (vm / hostnet.INDEX_FILE).symlink_to(victim)
    try:
        assert hostnet.attach(vm) == 1
        assert victim.read_text() == "host file\n" and not (vm / hostnet.INDEX_FILE).is_symlink()
        assert labnet.netns_owner(ns) == labnet.owner_mark(hosts_root)
        monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "other-state"))
        other = hostnet.docker_hosts_root() / "docker-host-b"
        other.mkdir(parents=True)
        with pytest.raises(LabctlError) as caught:
            hostnet.attach(other)
        assert "serves the named VMs of another state directory" in caught.value.message
        assert hostnet.release() == [] and labnet.namespace_exists(ns)
    finally:
        labnet.delete_netns(ns)
