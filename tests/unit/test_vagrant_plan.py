"""labctl's Vagrant plan (labctl.providers.vagrant_plan): boxes, management network,
host folders, node settings, what `validate --json --vagrant` prints; and the choices of
`up` kept in vagrant-env.json (labctl.providers.vagrant_settings). What the Vagrantfile
does with the plan: tests/unit/test_vagrant.py."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from labctl.errors import UsageError
from labctl.node.env import node_env as qemu_node_env
from labctl.providers import provider_for, vagrant_plan, vagrant_settings
from labctl.providers.vagrant import VagrantProvider
from labctl.providers.vagrant_settings import VagrantSettings
from labctl.store.labdir import LabDir
from labctl.topology.load import load_lab
from labctl.topology.resolved import Lab, Mount, Node
from tests.unit import jsonshape
from tests.unit.clirun import run_main

REPO = Path(__file__).resolve().parents[2]
TOPOLOGIES = REPO / "topologies"
INPUT = Path(__file__).parent / "topology" / "input"


def _node(name: str = "node1", index: int = 1, image: str = "trixie",
          mounts: tuple[Mount, ...] = ()) -> Node:
    return Node(name=name, index=index, rdma="rxe", memory_mib=512, cpus=1, image=image,
                interfaces=(), mounts=mounts)


def _home(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path)}  # no Vagrant box directory: public boxes


# --------------------------------------------------------------------------- boxes


def test_public_boxes_by_image_and_provider(tmp_path: Path) -> None:
    env = _home(tmp_path)
    trixie, bookworm = _node(), _node(image="bookworm")
    assert [vagrant_plan.box(trixie, p, env) for p in ("default", "libvirt", "virtualbox")] == [
        "bento/debian-13", "debian/trixie64", "bento/debian-13"]
    assert [vagrant_plan.box(bookworm, p, env) for p in ("libvirt", "virtualbox", "parallels")] == [
        "debian/bookworm64", "debian/bookworm64", "bento/debian-12"]
    one = {**env, "LABCTL_VAGRANT_BOX": "me/mine", "LABCTL_BOX": "labctl/trixie-k"}
    assert {vagrant_plan.box(trixie, p, one) for p in ("default", *vagrant_plan.PLUGINS)} == {
        "me/mine"}


def test_labctls_box_is_for_libvirt_only(tmp_path: Path) -> None:
    env = {**_home(tmp_path), "LABCTL_BOX": "labctl/trixie-k"}
    assert vagrant_plan.box(_node(), "libvirt", env) == "labctl/trixie-k"
    assert vagrant_plan.box(_node(), "virtualbox", env) == "bento/debian-13"


def test_each_node_gets_its_box_also_as_the_default_of_an_image_without_a_public_one(
        tmp_path: Path) -> None:
    """LABCTL_BOXES names a box per node (one per image: trixie-dev, `packages:` lists)."""
    env = {**_home(tmp_path), "LABCTL_BOXES": json.dumps(
        {"node1": "labctl/trixie-dev-a", "node2": "labctl/trixie-b"})}
    dev, plain = _node(image="trixie-dev"), _node("node2", 2)
    assert vagrant_plan.box(dev, "libvirt", env) == "labctl/trixie-dev-a"
    assert vagrant_plan.box(dev, "default", env) == "labctl/trixie-dev-a"
    assert vagrant_plan.box(plain, "libvirt", env) == "labctl/trixie-b"
    assert vagrant_plan.box(plain, "default", env) == "bento/debian-13"


def test_plain_vagrant_finds_the_newest_labctl_box(tmp_path: Path) -> None:
    """Vagrant's box directory: labctl/trixie-KEY boxes with a libvirt build, newest first."""
    boxes = tmp_path / "vagrant.d" / "boxes"
    for name, when in (("old", 1000), ("new", 2000)):
        box = boxes / f"labctl-VAGRANTSLASH-trixie-{name}"
        (box / "0" / "libvirt").mkdir(parents=True)
        os.utime(box, (when, when))
    (boxes / "labctl-VAGRANTSLASH-trixie-vbox" / "0" / "virtualbox").mkdir(parents=True)
    env = {"VAGRANT_HOME": str(tmp_path / "vagrant.d")}
    assert vagrant_plan.labctl_box(_node(), env) == "labctl/trixie-new"
    assert vagrant_plan.box(_node(), "libvirt", env) == "labctl/trixie-new"
    assert vagrant_plan.labctl_box(_node(image="bookworm"), env) is None


def test_bad_box_settings_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="LABCTL_BOXES is not a JSON object"):
        vagrant_plan.box(_node(), "libvirt", {**_home(tmp_path), "LABCTL_BOXES": "[1]"})
    with pytest.raises(UsageError, match="image 'trixie-dev' has no Vagrant box") as exc:
        vagrant_plan.box(_node(image="trixie-dev"), "default", _home(tmp_path))
    assert exc.value.hint == "set LABCTL_VAGRANT_BOX"


# --------------------------------------------------------------------------- the plan


def test_management_network_and_mac() -> None:
    net = vagrant_plan.mgmt_network("vag")
    assert net["name"] == "labctl-vag-mgmt"
    assert re.fullmatch(r"192\.168\.(1[3-9]\d|2[0-4]\d)\.0/24", net["address"])
    assert vagrant_plan.mgmt_network("two-node")["address"] == "192.168.205.0/24"
    mac = vagrant_plan.mgmt_mac("vag", _node("node3", 3))
    assert re.fullmatch(r"52:54:00(:[0-9a-f]{2}){2}:03", mac)
    assert mac != vagrant_plan.mgmt_mac("other", _node("node3", 3))


def test_libvirt_driver(tmp_path: Path) -> None:
    assert vagrant_plan.libvirt_driver({"LABCTL_LIBVIRT_DRIVER": "qemu"}) == "qemu"
    usable = os.access("/dev/kvm", os.R_OK | os.W_OK)
    assert vagrant_plan.libvirt_driver({}) == ("kvm" if usable else "qemu")


def test_host_folders_read_only_through_labctls_bind_mount() -> None:
    node = _node(mounts=(Mount("/src", "/work"), Mount("/data", "/data", readonly=True)))
    assert vagrant_plan.folders(node, Path("/labs/x")) == [
        {"source": "/src", "target": "/work", "mode": "rw"},
        {"source": "/labs/x/mounts/node1-1", "target": "/data", "mode": "ro"}]
    # plain Vagrant has no lab directory: the node mounts the folder itself read-only
    assert vagrant_plan.folders(node, None)[1] == {"source": "/data", "target": "/data",
                                                   "mode": "ro"}


def test_two_node_plan_has_labctls_values(tmp_path: Path) -> None:
    lab = load_lab(TOPOLOGIES / "two-node.yaml")
    plan = vagrant_plan.plan(lab, tmp_path / "lab", {**_home(tmp_path),
                                                     "LABCTL_LIBVIRT_DRIVER": "qemu"})
    node1 = plan["nodes"][0]
    assert plan["domain_prefix"] == "labctl-two-node_" and plan["libvirt_driver"] == "qemu"
    assert node1["networks"] == [{"name": "labctl-two-node-link1", "ifname": "eth1",
                                  "mac": "02:5f:eb:d7:01:01", "ipv4": "10.77.1.1/24",
                                  "mtu": 1500}]
    assert node1["node_env"] == {
        "LABCTL_LAB": "two-node", "LABCTL_NODE": "node1", "LABCTL_RDMA": "rxe",
        "LABCTL_RDMA_DEV": "rxe0", "LABCTL_RDMA_NETDEV": "eth1",
        "LABCTL_IFACES": "eth1,02:5f:eb:d7:01:01,10.77.1.1/24,1500"}
    assert (node1["memory_mib"], node1["cpus"], node1["vm_name"]) == (
        512, 1, "labctl-two-node-node1")
    assert node1["console_log"] == str(tmp_path / "lab" / "console-node1.log")
    assert node1["labctl_box"] is False  # no labctl box in this HOME
    assert node1["kernel_cmdline"].endswith(f"labctl.node=node1 labctl.mgmt={node1['mgmt_mac']}")
    assert plan["node_code_dir"] == "/opt/labctl"
    assert Path(plan["node_init"]) == REPO / "labctl" / "nodeside" / "node-init.sh"
    assert {"path": "labctl/verbs/__init__.py", "executable": False,
            "source": str(REPO / "labctl/verbs/__init__.py")} in plan["node_code"]


@pytest.mark.parametrize("topology", ["two-node", "four-node", "siw-pair",
                                      "three-node-switch", "docker-two-node"])
def test_node_env_is_the_qemu_nodes(topology: str, tmp_path: Path) -> None:
    lab = load_lab(TOPOLOGIES / f"{topology}.yaml")
    plan = vagrant_plan.plan(lab, None, _home(tmp_path))
    assert lab.nodes and len(plan["nodes"]) == len(lab.nodes)
    for node, planned in zip(lab.nodes, plan["nodes"], strict=True):
        expected = qemu_node_env(lab, node)
        del expected["LABCTL_MGMT_MAC"]  # Vagrant makes its own management NIC
        assert planned["node_env"] == expected
        assert planned["rdma"] == node.rdma


@pytest.mark.parametrize("topology, says", [
    (TOPOLOGIES / "routed.yaml", "routers and routes are not supported by the Vagrantfile"),
    (INPUT / "two-devices.yaml", "several RDMA devices per node"),
])
def test_what_the_vagrantfile_cannot_build_has_no_plan(
        topology: Path, says: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=says):
        vagrant_plan.plan(load_lab(topology), None, _home(tmp_path))


# --------------------------------------------------------------------------- validate --json


def test_validate_json_vagrant_adds_the_plan(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("LABCTL_BOXES", "LABCTL_BOX", "LABCTL_VAGRANT_BOX", "VAGRANT_HOME"):
        monkeypatch.delenv(var, raising=False)
    code, plain, _ = run_main(monkeypatch, capsys, "validate", "--json", "siw-pair")
    assert code == 0 and "vagrant" not in json.loads(plain)
    code, out, _ = run_main(monkeypatch, capsys, "validate", "--json", "--vagrant", "siw-pair")
    assert code == 0
    shaped = jsonshape.parsed("validate", out)
    assert [n.rdma for n in shaped.vagrant.nodes] == ["siw", "siw"]
    data = json.loads(out)
    assert {k: v for k, v in data.items() if k != "vagrant"} == json.loads(plain)  # only added
    lab = load_lab(TOPOLOGIES / "siw-pair.yaml")
    assert data["vagrant"] == vagrant_plan.plan(lab, None, dict(os.environ))


def test_validate_vagrant_refusals_exit_2(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(monkeypatch, capsys, "validate", "--json", "--vagrant",
                            str(TOPOLOGIES / "routed.yaml"))
    assert code == 2
    assert "error: nodes.node1: routers and routes are not supported by the Vagrantfile" in err
    assert "hint: use provider qemu or docker" in err
    code, _, err = run_main(monkeypatch, capsys, "validate", "--vagrant", "two-node")
    assert code == 2 and "error: --vagrant goes with --json" in err


# --------------------------------------------------------------------------- vagrant-env.json


def test_settings_round_trip_in_the_first_format(tmp_path: Path) -> None:
    settings = VagrantSettings(boxes={"node1": "labctl/trixie-dev-a"}, libvirt_driver="qemu")
    vagrant_settings.write(tmp_path, settings)
    on_disk = json.loads((tmp_path / "vagrant-env.json").read_text())
    assert on_disk == {"LABCTL_BOXES": '{"node1": "labctl/trixie-dev-a"}',
                       "LABCTL_LIBVIRT_DRIVER": "qemu"}
    assert vagrant_settings.read(tmp_path) == settings
    assert [p.name for p in tmp_path.iterdir()] == ["vagrant-env.json"]  # no temporary left
    vagrant_settings.write(tmp_path, VagrantSettings())
    assert (tmp_path / "vagrant-env.json").read_text() == "{}\n"


@pytest.mark.parametrize("text", [
    "", "[]", "not json", '{"LABCTL_BOXES": 3}', '{"LABCTL_BOXES": "[1]"}',
    '{"LABCTL_LIBVIRT_DRIVER": "xen"}', '{"LD_PRELOAD": "/x.so"}',
    '{"LABCTL_BOXES": "{\\"n\\": \\"a b\\", \\"m\\": 1}"}', "[" * 10000,
])
def test_settings_not_written_by_labctl_are_not_taken(text: str, tmp_path: Path) -> None:
    (tmp_path / "vagrant-env.json").write_text(text)
    assert vagrant_settings.read(tmp_path) == VagrantSettings()


def test_settings_file_is_read_bounded(tmp_path: Path) -> None:
    big = json.dumps({"LABCTL_LIBVIRT_DRIVER": "qemu", "x": "y" * vagrant_settings.MAX_BYTES})
    (tmp_path / "vagrant-env.json").write_text(big)
    assert vagrant_settings.read(tmp_path) == VagrantSettings()
    (tmp_path / "vagrant-env.json").unlink()
    os.mkfifo(tmp_path / "vagrant-env.json")  # never waited on
    assert vagrant_settings.read(tmp_path) == VagrantSettings()


def test_the_provider_hands_vagrant_the_plan_with_ups_choices(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("LABCTL_BOXES", "LABCTL_BOX", "LABCTL_VAGRANT_BOX", "LABCTL_LIBVIRT_DRIVER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("LABCTL_TOPOLOGY", "/not/this.yaml")
    lab = load_lab(TOPOLOGIES / "two-node.yaml")
    lab = Lab(lab.name, "vagrant", lab.source, lab.nodes, lab.segments)
    labdir = LabDir(lab.name, root=tmp_path / "labs")
    labdir.create(lab)
    provider = provider_for(lab, labdir)
    assert isinstance(provider, VagrantProvider)
    vagrant_settings.write(labdir.path, VagrantSettings(
        boxes={"node1": "labctl/trixie-a", "node2": "labctl/trixie-a"}, libvirt_driver="qemu"))
    env = provider.vagrant_env()  # a lab without a plan file gets one
    assert env["LABCTL_LAB_JSON"] == str(labdir.path / "vagrant-lab.json")
    assert "LABCTL_TOPOLOGY" not in env
    assert env["VAGRANT_DOTFILE_PATH"] == str(labdir.path / ".vagrant")
    data = json.loads((labdir.path / "vagrant-lab.json").read_text())
    assert data["name"] == "two-node" and data["provider"] == "vagrant"
    assert data["vagrant"]["libvirt_driver"] == "qemu"
    assert [n["boxes"]["libvirt"] for n in data["vagrant"]["nodes"]] == ["labctl/trixie-a"] * 2
    assert all(n["labctl_box"] for n in data["vagrant"]["nodes"])
    assert data["vagrant"]["nodes"][1]["console_log"] == str(labdir.path / "console-node2.log")
    # written again (repair): the new choices are in it
    vagrant_settings.write(labdir.path, VagrantSettings(libvirt_driver="kvm"))
    provider.write_plan()
    data = json.loads((labdir.path / "vagrant-lab.json").read_text())
    assert data["vagrant"]["libvirt_driver"] == "kvm"
    assert data["vagrant"]["nodes"][0]["boxes"]["libvirt"] == "debian/trixie64"
