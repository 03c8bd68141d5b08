"""Multi-host labs without VMs: named Docker host VMs' paths, the hosts' network numbering,
`hosts:`/`host:` placement, and the swarm plan (labctl/providers/swarm.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labctl.dockerhost import hostnet
from labctl.dockerhost.hosts import HostRecord, HostsRecord
from labctl.dockerhost.vm import DockerHostVM, data_disk, lock_file, vm_dir, vm_names
from labctl.errors import UsageError
from labctl.topology.load import parse_topology, resolve
from labctl.topology.resolved import Lab

TWO_HOSTS = """
name: mh
provider: docker
hosts: {h1: "vm:sw1", h2: "vm:sw2"}
nodes:
  a: {}
  b: {}
  c: {}
  d: {host: h1}
links:
  - endpoints: [a:eth1, b:eth1, c:eth1, d:eth1]
"""


@pytest.fixture()
def state_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "labctl" / "labs"
    monkeypatch.setenv("LABCTL_STATE_DIR", str(root))
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path / "cache"))
    return root


def _lab(text: str) -> Lab:
    return resolve(parse_topology(text, "t.yaml"), "t.yaml")


def test_the_default_vm_keeps_its_paths(state_root: Path) -> None:
    assert vm_dir().path == state_root / ".docker-hosts" / "docker-host"
    assert lock_file() == state_root / ".docker-hosts" / "docker-host.lock"
    vm = DockerHostVM()
    assert vm.socket == state_root / ".docker-hosts" / "docker-host" / "docker.sock"
    assert vm.machine.guest == "labctl-docker_host-engine"
    assert not vm.named and vm.host_address == ""


def test_named_vms_have_their_own_paths(state_root: Path) -> None:
    vm = DockerHostVM("sw1")
    assert vm.labdir.path == state_root / ".docker-hosts" / "docker-host-sw1"
    assert lock_file("sw1") == state_root / ".docker-hosts" / "docker-host-sw1.lock"
    assert vm.machine.guest == "labctl-docker_host_sw1-engine"
    assert vm.base_url == f"unix://{state_root / '.docker-hosts'}/docker-host-sw1/docker.sock"

    class FakeImage:  # data_disk reads only the image directory's name
        path = Path("/x/docker-host-abc")

    assert data_disk(FakeImage(), "sw1").name == "docker-host-abc.sw1.docker.ext4"  # type: ignore[arg-type]
    assert data_disk(FakeImage()).name == "docker-host-abc.docker.ext4"  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", "Sw1", "sw-1", "toolongname", "../x", "1sw", "share"])
def test_bad_vm_names_are_usage_errors(bad: str, state_root: Path) -> None:
    with pytest.raises(UsageError):
        DockerHostVM(bad)


def test_vm_names_lists_default_first(state_root: Path) -> None:
    for name in ("docker-host-sw2", "docker-host", "docker-host-sw1", "docker-host-Bad", "labs",
                 "docker-host-share"):  # the host folders' share, not a VM
        (state_root / ".docker-hosts" / name).mkdir(parents=True, exist_ok=True)
    (state_root / ".docker-hosts" / "docker-host.lock").touch()
    assert vm_names() == ["default", "sw1", "sw2"]


def test_hostnet_numbering() -> None:
    assert hostnet.cidr(1) == "10.250.0.1/24"
    assert hostnet.mac(2) == "0a:4c:48:00:00:02"
    assert hostnet.tap(12) == "t12-eth1"
    assert hostnet.NETNS.startswith("labctl-") and "_" in hostnet.NETNS  # no lab can own it


def test_round_robin_placement_in_node_order() -> None:
    lab = _lab(TWO_HOSTS)
    assert lab.provider_options["hosts"] == {"h1": "vm:sw1", "h2": "vm:sw2"}
    assert lab.provider_options["placement"] == {"a": "h1", "b": "h2", "c": "h1", "d": "h1"}


def test_labs_without_hosts_carry_no_options() -> None:
    text = TWO_HOSTS.replace('hosts: {h1: "vm:sw1", h2: "vm:sw2"}\n', "").replace(
        "{host: h1}", "{}")
    assert _lab(text).provider_options == {}


@pytest.mark.parametrize("engine", ["local", "vm:sw1", "ssh://root@10.1.2.3",
                                    "ssh://lab-host:2222", "unix:///run/other.sock",
                                    "my-context"])
def test_engine_references_accepted(engine: str) -> None:
    lab = _lab(TWO_HOSTS.replace('"vm:sw1"', '"vm:sw9"').replace('"vm:sw2"', f'"{engine}"'))
    assert lab.provider_options["hosts"]["h2"] == engine


def test_hosts_record_round_trips(tmp_path: Path) -> None:
    record = HostsRecord({"h1": HostRecord("vm:sw1", "unix:///x", vm="sw1", address="10.250.0.1",
                                           swarm_created=True)}, {"a": "h1"}, "swarmid")
    path = tmp_path / "hosts.json"
    record.save(path)
    assert HostsRecord.load(path) == record
    path.write_text("{not json")
    assert HostsRecord.load(path) is None


# --- the swarm plan ----------------------------------------------------------------------
def test_overlay_network_plan() -> None:
    from labctl.providers.swarm import endpoints, is_multi_host, plan_networks

    lab = _lab(TWO_HOSTS)
    assert is_multi_host(lab)
    (plan,) = plan_networks(lab, "labctl-owner:test")
    assert plan.create == {
        "name": "labctl-mh-link1", "driver": "overlay", "attachable": True, "internal": True,
        "options": {"com.docker.network.driver.mtu": "1500"},
        # Docker's own addresses (gateway, one per host) come from a block without nodes.
        "ipam": {"Driver": "default", "Config": [
            {"Subnet": "10.77.1.0/24", "IPRange": "10.77.1.128/25", "Gateway": "10.77.1.254"}]},
        "labels": {"labctl": "1", "labctl.lab": "mh", "labctl.owner": "labctl-owner:test",
                   "labctl.segment": "link1"},
    }
    mac = lab.node("b").interfaces[0].mac
    assert endpoints(lab, "b") == [("labctl-mh-link1", "10.77.1.2", mac)]


def test_one_used_host_is_not_a_swarm_lab() -> None:
    from labctl.providers.swarm import is_multi_host, single_host_engine

    text = TWO_HOSTS
    for node in ("a", "b", "c"):
        text = text.replace(f"  {node}: {{}}", f"  {node}: {{host: h1}}")
    lab = _lab(text)
    assert not is_multi_host(lab)
    assert single_host_engine(lab) == "vm:sw1"


def test_full_subnets_leave_no_room_for_dockers_addresses() -> None:
    from labctl.providers.base import UnsupportedError
    from labctl.providers.swarm import dynamic_range
    from labctl.topology.resolved import Segment

    seg = Segment(0, "link1", "p2p", "10.77.1.0/30", 1500, ("a:eth1", "b:eth1"))
    with pytest.raises(UnsupportedError, match="no free block"):
        dynamic_range(seg, {"10.77.1.1", "10.77.1.2"})
    seg = Segment(0, "link1", "switch", "10.77.1.0/24", 1500, ())
    used = {f"10.77.1.{i}" for i in range(1, 248)}
    assert dynamic_range(seg, used) == ("10.77.1.248/29", "10.77.1.254")


def test_swarm_tokens_are_private(tmp_path: Path, state_root: Path) -> None:
    from labctl.providers.swarm import _write_tokens, tokens_path
    from labctl.store.labdir import LabDir

    labdir = LabDir("mh")
    labdir.path.mkdir(parents=True)
    _write_tokens(labdir, {"worker": "SWMTKN-secret"})
    assert tokens_path(labdir).stat().st_mode & 0o777 == 0o600


def test_down_with_an_unreachable_host_fails_and_keeps_the_records(state_root: Path) -> None:
    from labctl.errors import LabctlError
    from labctl.providers.swarm import destroy
    from labctl.store.labdir import LabDir

    labdir = LabDir("mh")
    labdir.path.mkdir(parents=True)
    record = HostsRecord({"h1": HostRecord("unix:///nonexistent/labctl-test.sock",
                                           "unix:///nonexistent/labctl-test.sock",
                                           swarm_created=True)}, {"a": "h1"})
    record.save(labdir.path / "hosts.json")
    with pytest.raises(LabctlError) as info:
        destroy("mh", labdir)
    assert info.value.message.startswith("cannot clean up h1: ")
    assert "`labctl down` again" in info.value.hint
    assert HostsRecord.load(labdir.path / "hosts.json") == record


def test_docker_host_names_are_checked_by_the_cli(state_root: Path) -> None:
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "labctl", "docker-host", "status", "--name",
                             "Bad_Name"], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "bad Docker host VM name 'Bad_Name'" in result.stderr
