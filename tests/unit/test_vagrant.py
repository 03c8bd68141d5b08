"""The Vagrant path without a box: the Vagrantfile (with ruby and Debian's vagrant) and
the vagrant provider (with fake `vagrant` and `ssh` executables that record their argv).

What needs a hypervisor and a box (`vagrant up` itself) is not tested here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from labctl.errors import LabctlError
from labctl.images.recipes import node_packages
from labctl.lab.labdir import LabDir
from labctl.providers import provider_for
from labctl.providers.node import node_env as qemu_node_env
from labctl.providers.node import rdma_device_name as qemu_rdma_device_name
from labctl.providers.vagrant import (
    VagrantProvider,
    parse_ssh_config,
    parse_status,
    rdma_device_name,
)
from labctl.topology.load import load_lab
from labctl.topology.resolved import Lab

REPO = Path(__file__).resolve().parents[2]
VAGRANTFILE = REPO / "Vagrantfile"
SHIPPED = sorted((REPO / "topologies").glob("*.yaml"))
TOPOLOGIES = SHIPPED + sorted((Path(__file__).parent / "topology" / "input").glob("*.yaml"))
# Routers, routes, several devices per node: the Vagrantfile refuses them (test below),
# labctl too for vagrant.
ROUTED = [t for t in TOPOLOGIES if "router: true" in t.read_text()
          or "rdma_interfaces" in t.read_text()]
TOPOLOGIES = [t for t in TOPOLOGIES if t not in ROUTED]
# hosts: spreads docker nodes over engines (docs/multi-host.md): no Vagrantfile key.
TOPOLOGIES = [t for t in TOPOLOGIES if "\nhosts:" not in t.read_text()]

needs_ruby = pytest.mark.skipif(
    shutil.which("ruby") is None, reason="ruby not installed (it comes with Debian's vagrant)"
)
needs_vagrant = pytest.mark.skipif(
    shutil.which("vagrant") is None,
    reason="vagrant not installed (scripts/setup.sh installs Debian's vagrant package)",
)


def _ruby(code: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run `code` with the Vagrantfile loaded as a library (no Vagrant.configure)."""
    result = subprocess.run(
        ["ruby", "-rjson", "-e", f"load {json.dumps(str(VAGRANTFILE))}\n{code}", *args],
        env={"PATH": os.environ["PATH"], "LABCTL_VAGRANTFILE_LIBRARY": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _lab_dict(lab: Lab) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(lab.to_json())
    return data


# --------------------------------------------------------------------------- one package list


@needs_ruby
def test_vagrantfile_reads_the_image_builders_package_list() -> None:
    ruby = json.loads(_ruby("puts JSON.generate(LabctlVagrant.node_packages)"))
    assert ruby == list(node_packages())
    assert ruby, "the package list is empty"


@needs_ruby
def test_provisioning_installs_every_listed_package() -> None:
    script = _ruby(
        "lab = LabctlVagrant.load_lab\n"
        "print LabctlVagrant.packages_script(lab['nodes'][0], LabctlVagrant.node_packages)",
        env={"LABCTL_TOPOLOGY": str(REPO / "topologies" / "two-node.yaml")},
    )
    install = next(line for line in script.splitlines() if "apt-get install" in line)
    assert install.split()[-len(node_packages()) :] == list(node_packages())


def test_vagrantfile_does_not_copy_the_package_list() -> None:
    text = VAGRANTFILE.read_text()
    assert "node-packages.txt" in text
    for package in node_packages():
        assert not re.search(rf"(?<![\w.-]){re.escape(package)}(?![\w-])", text), (
            f"{package} is named in the Vagrantfile: the list lives in "
            "labctl/images/node-packages.txt only"
        )


# --------------------------------------------------------------------------- same lab


@pytest.fixture(scope="module")
def ruby_labs() -> dict[str, dict[str, Any]]:
    if shutil.which("ruby") is None:
        pytest.skip("ruby not installed")
    out = _ruby(
        "puts JSON.generate(ARGV.to_h { |f| [f, LabctlVagrant.resolve_topology(f)] })",
        *(str(t) for t in TOPOLOGIES),
    )
    labs: dict[str, dict[str, Any]] = json.loads(out)
    return labs


@pytest.mark.parametrize("topology", TOPOLOGIES, ids=lambda p: p.name)
def test_ruby_resolution_equals_labctls(
    topology: Path, ruby_labs: dict[str, dict[str, Any]]
) -> None:
    """Plain `vagrant up` (no labctl) gives the addresses, MACs, MTUs and node settings
    labctl resolves for the same file."""
    assert ruby_labs[str(topology)] == _lab_dict(load_lab(topology))


@needs_ruby
@pytest.mark.parametrize("topology", ROUTED, ids=lambda p: p.name)
def test_vagrantfile_refuses_routers_and_routes(topology: Path) -> None:
    with pytest.raises(AssertionError, match="are not supported by the Vagrantfile"):
        _ruby("LabctlVagrant.resolve_topology(ARGV[0])", str(topology))


@needs_ruby
def test_lab_json_wins_over_the_topology(tmp_path: Path) -> None:
    lab = load_lab(REPO / "topologies" / "three-node-switch.yaml")
    lab_json = tmp_path / "lab.json"
    lab_json.write_text(lab.to_json())
    out = _ruby(
        "puts JSON.generate(LabctlVagrant.load_lab)",
        env={
            "LABCTL_LAB_JSON": str(lab_json),
            "LABCTL_TOPOLOGY": str(REPO / "topologies" / "two-node.yaml"),
        },
    )
    assert json.loads(out) == _lab_dict(lab)


@needs_ruby
@pytest.mark.parametrize("topology", [t for t in SHIPPED if t not in ROUTED],
                         ids=lambda p: p.name)
def test_node_env_matches_the_qemu_nodes(topology: Path) -> None:
    lab = load_lab(topology)
    out = _ruby(
        "lab = LabctlVagrant.load_lab\n"
        "puts JSON.generate(lab['nodes'].to_h { |n| [n['name'], "
        "[LabctlVagrant.node_env(lab, n), LabctlVagrant.rdma_device(n)]] })",
        env={"LABCTL_TOPOLOGY": str(topology)},
    )
    ruby = json.loads(out)
    for node in lab.nodes:
        env, device = ruby[node.name]
        expected = qemu_node_env(lab, node)
        del expected["LABCTL_MGMT_MAC"]  # Vagrant's own management NIC
        assert env == expected
        assert device == rdma_device_name(node)
        if node.rdma_interface is not None:
            assert device == qemu_rdma_device_name(node)


# --------------------------------------------------------------------------- scripts


@pytest.fixture(scope="module")
def scripts() -> dict[str, str]:
    if shutil.which("ruby") is None:
        pytest.skip("ruby not installed")
    out = _ruby(
        textwrap.dedent(
            """
            lab = LabctlVagrant.load_lab
            rxe, siw = lab['nodes'][0], lab['nodes'][0].merge('rdma' => 'siw')
            puts JSON.generate(
              'packages-rxe' => LabctlVagrant.packages_script(rxe, LabctlVagrant.node_packages),
              'packages-siw' => LabctlVagrant.packages_script(siw, LabctlVagrant.node_packages),
              'siw' => LabctlVagrant.siw_script,
              'code' => LabctlVagrant.code_script,
              'node' => LabctlVagrant.node_script(lab, rxe),
              'node-up' => LabctlVagrant.node_up_script,
            )
            """
        ),
        env={"LABCTL_TOPOLOGY": str(REPO / "tests/unit/topology/input/interface-order.yaml")},
    )
    result: dict[str, str] = json.loads(out)
    return result


@pytest.mark.parametrize("name", ["packages-rxe", "packages-siw", "siw", "code", "node", "node-up"])
@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_provisioning_scripts_parse(scripts: dict[str, str], name: str, shell: str) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} not installed")
    result = subprocess.run(
        [shell, "-n"], input=scripts[name], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_node_script_installs_a_boot_unit(scripts: dict[str, str]) -> None:
    node = scripts["node"]
    assert "/etc/systemd/system/labctl-node.service" in node
    assert "systemctl enable labctl-node.service" in node
    assert "WantedBy=multi-user.target" in node
    assert "LABCTL_RDMA_DEV='rxe0'" in node
    assert "ExecStart=/usr/local/sbin/labctl-node-up start" in node


@needs_ruby
def test_code_script_installs_the_node_side_code(tmp_path: Path) -> None:
    dest = tmp_path / "opt" / "labctl"
    script = _ruby(f"print LabctlVagrant.code_script(LabctlVagrant.root, {json.dumps(str(dest))})")
    # On stdin: as one `sh -c` argument the script would outgrow MAX_ARG_STRLEN (128 KiB).
    result = subprocess.run(["sh"], input=script, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    expected = {"labctl/__init__.py"} | {
        str(p.relative_to(REPO))
        for sub in ("nodeside", "verbs")
        for p in (REPO / "labctl" / sub).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }
    installed = {str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()}
    assert installed == expected
    for rel in expected:
        assert (dest / rel).read_bytes() == (REPO / rel).read_bytes(), rel
        src_exec = os.access(REPO / rel, os.X_OK)
        assert bool((dest / rel).stat().st_mode & stat.S_IXUSR) == src_exec, rel
    # The node-side modules import from there (no pyverbs needed for these two).
    check = subprocess.run(
        [sys.executable, "-c", "import labctl.nodeside.status, labctl.verbs"],
        env={"PYTHONPATH": str(dest)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stderr


def _netns_usable() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


@pytest.mark.skipif(not _netns_usable(), reason="needs root and iproute2 (network namespaces)")
def test_node_up_names_and_addresses_data_nics_by_mac(
    scripts: dict[str, str], tmp_path: Path
) -> None:
    """labctl-node-up in a throwaway namespace: NICs whose names collide with the wanted
    ones (eth2 holds eth1's MAC...) end up named, sized and addressed as the topology says."""
    lab = load_lab(REPO / "tests/unit/topology/input/interface-order.yaml")
    hub = lab.node("hub")
    env = qemu_node_env(lab, hub)
    env["LABCTL_RDMA"] = "none"  # no RDMA in the host kernel; the NIC part is under test
    (tmp_path / "node.env").write_text("".join(f"{k}='{v}'\n" for k, v in env.items()))
    script = (
        scripts["node-up"]
        .replace("/etc/labctl/node.env", str(tmp_path / "node.env"))
        .replace("modprobe -a $modules", "true")
        .replace("udevadm settle --timeout=30", "true")
    )
    (tmp_path / "up.sh").write_text(script)
    ns = f"rdmalab-vt{os.getpid()}"
    wrong = {"eth1": "eth2", "eth2": "eth10", "eth10": "eth1"}  # wanted name -> start name
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for i, iface in enumerate(hub.interfaces):
            subprocess.run(
                [
                    "ip",
                    "-n",
                    ns,
                    "link",
                    "add",
                    wrong[iface.name],
                    "address",
                    iface.mac,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    f"peer{i}",
                ],
                check=True,
            )
        subprocess.run(["ip", "-n", ns, "addr", "add", "192.0.2.9/24", "dev", "eth1"], check=True)
        for _ in range(2):  # idempotent: a second start changes nothing
            run = subprocess.run(
                ["ip", "netns", "exec", ns, "sh", str(tmp_path / "up.sh"), "start"],
                capture_output=True,
                text=True,
                check=False,
            )
            assert run.returncode == 0, run.stdout + run.stderr
            links = json.loads(
                subprocess.run(
                    ["ip", "-n", ns, "-j", "addr", "show"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
            by_name = {link["ifname"]: link for link in links}
            for iface in hub.interfaces:
                link = by_name[iface.name]
                assert link["address"] == iface.mac
                assert link["mtu"] == iface.mtu
                addrs = [
                    f"{a['local']}/{a['prefixlen']}"
                    for a in link["addr_info"]
                    if a["family"] == "inet"
                ]
                assert addrs == [iface.ipv4]
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


# --------------------------------------------------------------------------- vagrant validate


@pytest.fixture(scope="module")
def vagrant_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if shutil.which("vagrant") is None:
        pytest.skip("vagrant not installed (scripts/setup.sh installs Debian's vagrant package)")
    home = tmp_path_factory.mktemp("vagrant-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LABCTL_", "VAGRANT_"))}
    return {
        **env,
        "VAGRANT_CWD": str(REPO),
        "VAGRANT_HOME": str(home),  # no user plugins or boxes; system plugins still load
        "VAGRANT_DOTFILE_PATH": str(home / "dotfile"),  # nothing written into the repo
        "VAGRANT_CHECKPOINT_DISABLE": "1",  # no version check over the network
    }


@pytest.fixture(scope="module")
def validate_args(vagrant_env: dict[str, str]) -> list[str]:
    """No hypervisor here: with the vagrant-libvirt plugin (Debian: vagrant-libvirt), which
    checks its settings without libvirtd, validate for libvirt; else skip provider settings."""
    if "vagrant-libvirt" in _vagrant(vagrant_env, "plugin", "list").stdout:
        return ["validate"]
    return ["validate", "--ignore-provider"]


def _vagrant(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["vagrant", *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _validate(env: dict[str, str], args: list[str]) -> None:
    if args == ["validate"]:
        env = {**env, "VAGRANT_DEFAULT_PROVIDER": "libvirt"}
    result = _vagrant(env, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "validated successfully" in result.stdout
    assert not (REPO / ".vagrant").exists()


@needs_vagrant
@pytest.mark.parametrize("topology", SHIPPED, ids=lambda p: p.name)
def test_vagrant_validate_labctl_labs(
    topology: Path, vagrant_env: dict[str, str], validate_args: list[str], tmp_path: Path
) -> None:
    """What `labctl up` hands to vagrant: the resolved lab as JSON."""
    (tmp_path / "lab.json").write_text(load_lab(topology).to_json())
    _validate({**vagrant_env, "LABCTL_LAB_JSON": str(tmp_path / "lab.json")}, validate_args)


@needs_vagrant
def test_vagrant_validate_plain(vagrant_env: dict[str, str], validate_args: list[str]) -> None:
    """Plain `vagrant up` (default topology, Ruby resolution) and a LABCTL_TOPOLOGY one."""
    _validate(vagrant_env, validate_args)
    siw = {**vagrant_env, "LABCTL_TOPOLOGY": "topologies/siw-pair.yaml"}  # relative to the repo
    _validate(siw, validate_args)


@needs_vagrant
def test_vagrant_validate_reports_a_bad_lab(vagrant_env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nnodes: {a: {}}\nlinks:\n  - endpoints: [a:eth1, b:eth1]\n")
    env = {**vagrant_env, "LABCTL_TOPOLOGY": str(bad)}
    result = _vagrant(env, "validate", "--ignore-provider")
    assert result.returncode != 0
    assert 'node "b" is not defined' in result.stdout + result.stderr


# --------------------------------------------------------------------------- the provider

# `vagrant plugin list` as Debian's vagrant 2.3.4 prints it: what check_host reads. The rest
# of the provider (up, ssh-config, status, destroy) runs against the real tools in
# tests/integration/test_vagrant_live.py, not against a fake.
FAKE_VAGRANT = """\
#!{python}
import json, os, sys
args = sys.argv[1:]
keep = ("VAGRANT_CWD", "VAGRANT_DOTFILE_PATH", "LABCTL_LAB_JSON", "LABCTL_TOPOLOGY")
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"argv": args, "env": {{k: os.environ.get(k) for k in keep}}}}) + "\\n")
if args[:2] == ["plugin", "list"]:
    print(os.environ.get("FAKE_PLUGINS", "No plugins installed."))
else:
    print("fake vagrant: unexpected " + " ".join(args), file=sys.stderr)
    sys.exit(3)
"""


class Fake:
    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.log = tmp_path / "vagrant.jsonl"
        path = self.bin / "vagrant"
        path.write_text(FAKE_VAGRANT.format(python=sys.executable))
        path.chmod(0o755)
        (self.bin / "ssh").write_text("#!/bin/sh\nexit 3\n")  # check_host looks for it only
        (self.bin / "ssh").chmod(0o755)
        self.monkeypatch = monkeypatch
        monkeypatch.setenv("PATH", str(self.bin))  # nothing else: no VBoxManage, no real ssh
        monkeypatch.setenv("FAKE_LOG", str(self.log))
        monkeypatch.setenv("FAKE_PLUGINS", "vagrant-libvirt (0.11.2, system)")
        for var in (
            "LABCTL_VAGRANT_PROVIDER",
            "VAGRANT_DEFAULT_PROVIDER",
            "LABCTL_VAGRANTFILE_DIR",
        ):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("LABCTL_TOPOLOGY", "/should/not/reach/vagrant.yaml")

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]



@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fake:
    return Fake(tmp_path, monkeypatch)


def _provider(tmp_path: Path, fake: Fake, topology: str = "two-node.yaml") -> VagrantProvider:
    lab = load_lab(REPO / "topologies" / topology)
    lab = Lab(lab.name, "vagrant", lab.source, lab.nodes, lab.segments, {"accel": "auto"})
    labdir = LabDir(lab.name, root=tmp_path / "labs")
    labdir.create(lab)
    fake.monkeypatch.setenv("FAKE_NODES", " ".join(n.name for n in lab.nodes))
    provider = provider_for(lab, labdir)
    assert isinstance(provider, VagrantProvider)
    return provider


def test_check_host_picks_a_usable_provider(tmp_path: Path, fake: Fake) -> None:
    provider = _provider(tmp_path, fake)
    provider.check_host()
    assert provider.vagrant_provider == "libvirt"
    # The plugin list is read without the lab's environment (lab.json may not exist yet).
    assert fake.calls()[-1]["argv"] == ["plugin", "list"]
    assert fake.calls()[-1]["env"]["LABCTL_LAB_JSON"] is None


def test_check_host_explains_a_missing_provider(tmp_path: Path, fake: Fake) -> None:
    fake.monkeypatch.setenv("FAKE_PLUGINS", "No plugins installed.")
    with pytest.raises(LabctlError, match="no usable Vagrant provider") as exc:
        _provider(tmp_path, fake).check_host()
    assert exc.value.hint and "vagrant-libvirt" in exc.value.hint
    fake.monkeypatch.setenv("LABCTL_VAGRANT_PROVIDER", "virtualbox")
    with pytest.raises(LabctlError, match="VBoxManage"):
        _provider(tmp_path / "b", fake).check_host()
    fake.monkeypatch.setenv("LABCTL_VAGRANT_PROVIDER", "hyperv")
    with pytest.raises(LabctlError, match="not configured by the Vagrantfile"):
        _provider(tmp_path / "c", fake).check_host()


def test_check_host_without_vagrant(tmp_path: Path, fake: Fake) -> None:
    (fake.bin / "vagrant").unlink()
    with pytest.raises(LabctlError, match="vagrant not found") as exc:
        _provider(tmp_path, fake).check_host()
    assert exc.value.hint and "apt-get install vagrant" in exc.value.hint


def test_exec_uses_plain_ssh_with_the_lab_config(tmp_path: Path, fake: Fake) -> None:
    provider = _provider(tmp_path, fake)
    argv = provider.exec_argv("node2", ["ibv_devinfo", "-d", "rxe0"])
    assert argv == [
        "ssh",
        "-F",
        str(provider.labdir.ssh_config),
        "-T",
        "node2",
        "--",
        "ibv_devinfo -d rxe0",
    ]
    assert provider.exec_argv("node1", [], tty=True)[3] == "-tt"


def test_parsers() -> None:
    assert parse_status(
        "1,node1,state,running\n1,node1,state-human-short,running\n1,,ui,info,x,y\n"
    ) == {"node1": "running"}
    hosts = parse_ssh_config(
        'Host a\n  HostName h\n  IdentityFile "/p q/key"\n\nHost b\n  Port 2\n'
    )
    assert hosts == {"a": [("HostName", "h"), ("IdentityFile", "/p q/key")], "b": [("Port", "2")]}


# --------------------------------------------------------------------------- labctl's box

def test_box_stage1_starts_the_box_boot_instead_of_the_nodes() -> None:
    from importlib import resources

    from labctl.images import box

    image_init = resources.files("labctl.images").joinpath("initramfs-init.sh").read_text()
    stage1 = box.box_stage1(image_init)
    assert box.NODE_STAGE2 not in stage1
    assert f"/usr/bin/tini -- {box.STAGE2}" in stage1
    # everything else of the image's stage 1 is kept (root on /dev/vda, payload copy)
    assert stage1.replace(box.STAGE2, box.NODE_STAGE2) == image_init
    with pytest.raises(LabctlError, match="stage 1"):
        box.box_stage1("#!/bin/sh\nexec /sbin/init\n")


def test_box_initrd_appends_init_and_payload(tmp_path: Path) -> None:
    from labctl.images import box
    from labctl.images.builder import Image

    (tmp_path / "initrd.cpio").write_bytes(b"IMAGE-STAGE1")
    image = Image(tmp_path, tmp_path / "vmlinux", tmp_path / "initrd.cpio",
                  tmp_path / "root.ext4", {})
    data = box.box_initrd(image, "ssh-rsa AAAA test")
    assert data.startswith(b"IMAGE-STAGE1")  # the image's own stage 1 first, then ours
    names = [b"init\0", b"payload/root/.ssh/authorized_keys\0",
             b"payload/usr/local/sbin/labctl-box-init\0"]
    for name in names:
        assert name in data
    assert b"ssh-rsa AAAA test\n" in data


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_box_init_parses(shell: str, tmp_path: Path) -> None:
    from labctl.images import box

    script = tmp_path / "box-init.sh"
    script.write_text(box.box_init_text())
    subprocess.run([shell, "-n", str(script)], check=True)


@needs_ruby
def test_vagrantfile_uses_labctls_box_with_an_isolated_management_network() -> None:
    lab = {"name": "vag", "nodes": [{"name": "node1", "index": 1, "image": "trixie"}]}
    code = (
        "lab = JSON.parse(ARGV[0]); node = lab['nodes'][0]\n"
        "puts JSON.generate([LabctlVagrant.box(node, 'libvirt'),"
        " LabctlVagrant.box(node, 'virtualbox'),"
        " LabctlVagrant.mgmt_network(lab), LabctlVagrant.mgmt_mac(lab, node),"
        " LabctlVagrant.libvirt_driver])"
    )
    out = json.loads(_ruby(code, json.dumps(lab), env={"LABCTL_BOX": "labctl/trixie-k",
                                                       "LABCTL_LIBVIRT_DRIVER": "qemu"}))
    assert out[0] == "labctl/trixie-k"
    assert out[1] == "bento/debian-13"  # the labctl box is a libvirt box only
    assert out[2]["name"] == "labctl-vag-mgmt"
    assert re.fullmatch(r"192\.168\.(1[3-9]\d|2[0-4]\d)\.0/24", out[2]["address"])
    assert re.fullmatch(r"52:54:00(:[0-9a-f]{2}){2}:01", out[3])
    assert out[4] == "qemu"


@needs_ruby
def test_vagrantfile_gives_each_node_its_box_and_its_host_folders() -> None:
    """LABCTL_BOXES names a box per node (one per image: trixie-dev, `packages:` lists),
    also for the default box of an image without a public one; `:ro` folders come from
    labctl's read-only bind mounts in the lab directory."""
    nodes = [{"name": "node1", "index": 1, "image": "trixie-dev",
              "mounts": [{"source": "/src", "target": "/work", "readonly": False},
                         {"source": "/data", "target": "/data", "readonly": True}]},
             {"name": "node2", "index": 2, "image": "trixie"}]
    code = (
        "nodes = JSON.parse(ARGV[0])\n"
        "puts JSON.generate([nodes.map { |n| LabctlVagrant.box(n, 'libvirt') },"
        " LabctlVagrant.box(nodes[0], 'default'),"
        " nodes.map { |n| LabctlVagrant.host_folders(n, '/labs/x') }])"
    )
    boxes = json.dumps({"node1": "labctl/trixie-dev-a", "node2": "labctl/trixie-b"})
    out = json.loads(_ruby(code, json.dumps(nodes), env={"LABCTL_BOXES": boxes}))
    assert out[0] == ["labctl/trixie-dev-a", "labctl/trixie-b"]
    assert out[1] == "labctl/trixie-dev-a"
    assert out[2] == [[["/src", "/work", "rw"], ["/labs/x/mounts/node1-1", "/data", "ro"]], []]


@needs_ruby
def test_vagrant_provision_skips_packages_on_labctls_image() -> None:
    """labctl's image has the packages (and no network to fetch any): the packages and siw
    steps stop at once there, and the node step runs the bring-up without systemd."""
    code = ("node = {'name' => 'n', 'rdma' => 'siw', 'interfaces' => []}\n"
            "puts LabctlVagrant.packages_script(node, ['rdma-core'])\n"
            "puts '----'\nputs LabctlVagrant.siw_script")
    packages, siw = _ruby(code).split("----\n")
    for script in (packages, siw):
        guard = script.index("/etc/labctl-kernel")
        assert guard < script.index("exit 0") < script.index("apt-get" if script is packages
                                                               else "mktemp")
