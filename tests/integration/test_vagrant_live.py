"""The vagrant provider for real: Debian's vagrant + vagrant-libvirt, libvirtd under TCG.

One two-node lab (topologies/two-node.yaml with `provider: vagrant`, under a lab name of
its own) booted from labctl's own box (`labctl image box`), with libvirtd started by
`labctl up` when none runs: status, RC pingpong, rping (RDMA CM), inspector fidelity (C
ibv_devinfo vs the Python one in a node); the lab is the module's own (modulelab), and
after its `labctl down` no libvirt domain, volume, network, dnsmasq, libvirtd or virtlogd
of the lab is left (a libvirtd that ran before is left running). Lab name:
LABCTL_VAGRANT_TEST_LAB.

It runs where vagrant, vagrant-libvirt and libvirt are installed (scripts/setup.sh
installs them; in CI a skip is a failure) and adds about 2.5 to 3.5 minutes under TCG;
LABCTL_TEST_VAGRANT=0 leaves it out (docs/vagrant.md, "What is verified").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from labctl.lab.handle import LabHandle
from labctl.providers import libvirtd
from tests.integration.conftest import host_folders, labctl, make_topology, passed_run
from tests.integration.modulelab import ModuleLab, module_lab


def _missing_tools() -> list[str]:
    tools = {"vagrant": "vagrant", "virsh": "libvirt-clients", "libvirtd": "libvirt-daemon",
             "dnsmasq": "dnsmasq-base", "iptables": "iptables"}
    missing = [pkg for tool, pkg in tools.items()
               if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists()]
    if not Path("/usr/lib/x86_64-linux-gnu/libvirt/connection-driver/"
                "libvirt_driver_qemu.so").exists() and not missing:
        missing.append("libvirt-daemon-driver-qemu")
    plugins = "/usr/share/rubygems-integration/all/specifications"
    if not list(Path(plugins).glob("vagrant-libvirt-*.gemspec")):
        missing.append("vagrant-libvirt")
    return missing


MISSING = _missing_tools()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.environ.get("LABCTL_TEST_VAGRANT") == "0",
                       reason="LABCTL_TEST_VAGRANT=0: the live Vagrant test is left out"),
    pytest.mark.skipif(bool(MISSING),
                       reason=f"not installed: {' '.join(MISSING)} (scripts/setup.sh)"),
]

LAB = os.environ.get("LABCTL_VAGRANT_TEST_LAB", "vitest")
NODES = ("node1", "node2")


def _pids(name: str) -> list[int]:
    """Running processes called `name`: a daemon that exited but whose (sub)reaper has not
    collected it yet is a zombie, not running."""
    out = subprocess.run(["pgrep", "-x", name], capture_output=True, text=True).stdout
    return sorted(int(p) for p in out.split() if libvirtd.is_running(int(p)))


def _lab_dnsmasq(name: str) -> dict[str, list[str]]:
    out = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout
    return {"dnsmasq": [line for line in out.splitlines()
                        if line.startswith("/usr/sbin/dnsmasq") and f"labctl-{name}-" in line]}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Host folders for the lab's mounts (under root's 0700 pytest directory, which
    libvirt-qemu could not enter), each with a file written on the host."""
    return host_folders(tmp_path_factory, "vagrant-folders")


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory, folders: dict[str, Path]) -> Path:
    # node1 boots the dev image (a box of its own), node2 the node image; both mount a
    # read-write and a read-only host folder.
    return make_topology(
        tmp_path_factory.mktemp("vagrant"), "two-node.yaml", LAB, provider="vagrant",
        defaults={"mounts": [f"{folders['rw']}:/mnt/rw", f"{folders['ro']}:/mnt/ro:ro"]},
        nodes={"node1": {"image": "trixie-dev"}, "node2": {}})


@pytest.fixture(scope="module")
def libvirt_host(folders: dict[str, Path]) -> Iterator[None]:
    """libvirt as it was before the lab, and after it (this runs after the lab's down):
    a libvirtd that ran before still runs, without the lab's objects; one labctl started
    is gone with everything it made; the lab's bind mounts are gone, the host folders
    not."""
    before = {"libvirtd": _pids("libvirtd"), "virtlogd": _pids("virtlogd")}
    os.environ["LABCTL_VAGRANT_PROVIDER"] = "libvirt"  # for `labctl up` and `down`
    yield
    os.environ.pop("LABCTL_VAGRANT_PROVIDER", None)
    if before["libvirtd"]:  # it ran before: left running, without this lab's objects
        assert _pids("libvirtd") == before["libvirtd"]
        assert not [d for d in libvirtd.domains() if d.startswith(f"labctl-{LAB}_")]
        assert not [n for n in libvirtd.networks() if n.startswith(f"labctl-{LAB}-")]
        assert not [v for v in libvirtd.volumes() if v.startswith(f"labctl-{LAB}_")]
    else:  # labctl started it: everything it made is gone with it
        assert _pids("libvirtd") == [] and _pids("virtlogd") == before["virtlogd"]
        assert not Path("/etc/libvirt/qemu", f"labctl-{LAB}_node1.xml").exists()
        assert not list(Path("/etc/libvirt/qemu/networks").glob(f"labctl-{LAB}-*.xml"))
        assert not list(Path("/var/lib/libvirt/images").glob("labctl-*"))
        assert libvirtd.load_record() is None
    # the read-only bind mounts are gone, the host folders and their files are not
    mountinfo = Path("/proc/self/mountinfo").read_text()
    assert f"/{LAB}/mounts/" not in mountinfo
    assert (folders["ro"] / "from-host.txt").read_text() == "host ro\n"


vagrant_lab = module_lab(LAB, up_args=lambda topology: ["--timeout", "600"],
                         requires=("libvirt_host",), leftovers=_lab_dnsmasq)


@pytest.fixture(scope="module")
def handle(vagrant_lab: ModuleLab) -> LabHandle:
    return vagrant_lab.handle


def test_status_shows_two_running_libvirt_nodes(handle: LabHandle) -> None:
    result = labctl("status", "--lab", LAB, "--json", check=True)
    (status,) = json.loads(result.stdout)["labs"]
    assert status["provider"] == "vagrant"
    for node in status["nodes"]:
        assert node["state"] == "running", node
        assert node["details"]["vagrant"] == "libvirt"
        devices = {d["name"]: d for d in node["devices"]}
        assert devices["rxe0"]["port_state"] == "ACTIVE"
    domains = libvirtd.virsh("list", "--name").stdout.split()
    assert sorted(d for d in domains if d.startswith(f"labctl-{LAB}_")) == [
        f"labctl-{LAB}_{n}" for n in NODES]


def test_networks_are_isolated(handle: LabHandle) -> None:
    """The management network has no <forward> (isolated: no NAT, no route out), the data
    link has none and no host address either."""
    for name in (f"labctl-{LAB}-mgmt", f"labctl-{LAB}-link1"):
        xml = libvirtd.virsh("net-dumpxml", name).stdout
        assert "<network" in xml, name
        assert "<forward" not in xml, xml
    assert "<ip " not in libvirtd.virsh("net-dumpxml", f"labctl-{LAB}-link1").stdout


def test_exec_runs_in_the_node(handle: LabHandle) -> None:
    result = labctl("exec", "--lab", LAB, "node2", "--", "cat", "/etc/hostname", check=True)
    assert result.stdout.strip() == "node2"


def test_rc_pingpong(handle: LabHandle) -> None:
    record = passed_run(LAB, "pingpong", "--transport", "rc", "--iters", "100", "--size", "1024")
    assert record["figures"]["iters"] == 100


def test_rping_through_rdma_cm(handle: LabHandle) -> None:
    passed_run(LAB, "rping")


def test_inspector_matches_ibv_devinfo(handle: LabHandle) -> None:
    c = handle.run("node1", ["ibv_devinfo", "-v"], timeout=120)
    py = labctl("devinfo", "--lab", LAB, "node1", "-v", check=True, timeout=300)
    assert c.returncode == 0, c.stderr
    assert py.stdout == c.stdout
    assert "rxe0" in c.stdout
    # labctl's box is the node image: labctl devinfo ran its compiled client
    path = handle.run("node1", ["readlink", "-f", "/usr/local/bin/labctl-devinfo"], timeout=60)
    assert path.stdout.strip() == "/usr/local/lib/labctl/labctl-verbs-client", path


def test_host_folders_both_ways(handle: LabHandle, folders: dict[str, Path]) -> None:
    """A file written on the host is read in the nodes, one written in a node is read on
    the host; a `:ro` folder refuses writes from the node."""
    for node in NODES:
        seen = handle.run(node, ["cat", "/mnt/rw/from-host.txt", "/mnt/ro/from-host.txt"],
                          timeout=60)
        assert seen.stdout == "host rw\nhost ro\n", seen.stderr
        wrote = handle.run(node, ["sh", "-c", f"echo {node} > /mnt/rw/from-{node}.txt"],
                           timeout=60)
        assert wrote.returncode == 0, wrote.stderr
        assert (folders["rw"] / f"from-{node}.txt").read_text() == f"{node}\n"
        refused = handle.run(node, ["sh", "-c", "echo no > /mnt/ro/from-node.txt"], timeout=60)
        assert refused.returncode != 0
        assert "Read-only file system" in refused.stderr
        # not even after a remount: the host's bind mount is read-only
        handle.run(node, ["mount", "-o", "remount,rw", "/mnt/ro"], timeout=60)
        again = handle.run(node, ["sh", "-c", "echo no > /mnt/ro/from-node.txt"], timeout=60)
        assert again.returncode != 0
    assert not (folders["ro"] / "from-node.txt").exists()


def test_each_node_boots_its_own_image(handle: LabHandle) -> None:
    """node1 boots the dev image's box (gcc), node2 the node image's (no gcc)."""
    dev = handle.run("node1", ["gcc", "--version"], timeout=60)
    assert dev.returncode == 0 and "gcc" in dev.stdout, dev.stderr
    plain = handle.run("node2", ["sh", "-c", "command -v gcc"], timeout=60)
    assert plain.returncode != 0
