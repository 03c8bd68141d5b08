"""The Vagrant path without a box: the Vagrantfile (with ruby and Debian's vagrant) and
the vagrant provider (with fake `vagrant` and `ssh` executables that record their argv).

The contract: the Vagrantfile derives nothing. It reads labctl's lab and Vagrant plan
(`labctl validate --json --vagrant`, labctl.providers.vagrant_plan) and hands those values
to Vagrant as they are; a fake `Vagrant.configure` records what Vagrant would get.
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
from pathlib import Path
from typing import Any

import pytest

from labctl.data.recipes import node_packages
from labctl.errors import LabctlError, UsageError
from labctl.node.env import node_env as qemu_node_env
from labctl.nodeside import NODE_INIT
from labctl.providers import provider_for, vagrant_plan
from labctl.providers.vagrant import (
    VagrantProvider,
    parse_ssh_config,
    parse_status,
)
from labctl.store.labdir import LabDir
from labctl.topology.catalog import find_topology
from labctl.topology.load import load_lab
from labctl.topology.resolved import Lab

REPO = Path(__file__).resolve().parents[2]
VAGRANTFILE = REPO / "labctl" / "data" / "Vagrantfile"
TOP_VAGRANTFILE = REPO / "Vagrantfile"
SHIPPED = sorted((REPO / "topologies").glob("*.yaml"))
# Routers, routes, several devices per node: labctl has no Vagrant plan for them (below).
ROUTED = [t for t in SHIPPED if "router: true" in t.read_text()
          or "rdma_interfaces" in t.read_text()]
# The workloads image has no public box: labctl makes its box (labctl.images.box) only
# for a Vagrant lab that asks for it, so planning it here would need that build.
OWN_BOX_ONLY = [t for t in SHIPPED if "image: trixie-workloads" in t.read_text()]
PLANNED = [t for t in SHIPPED if t not in ROUTED and t not in OWN_BOX_ONLY]
# labctl as a plain `vagrant up` runs it, from this checkout.
LABCTL_COMMAND = f"{sys.executable} -m labctl"

needs_ruby = pytest.mark.skipif(
    shutil.which("ruby") is None, reason="ruby not installed (it comes with Debian's vagrant)"
)
needs_vagrant = pytest.mark.skipif(
    shutil.which("vagrant") is None,
    reason="vagrant not installed (scripts/setup.sh installs Debian's vagrant package)",
)


def _plain_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a plain `vagrant up`: no labctl settings, labctl importable."""
    return {"PATH": os.environ["PATH"], "HOME": str(home), "PYTHONPATH": str(REPO), **extra}


def _run_ruby(code: str, *args: str, env: dict[str, str], before: str = "",
              vagrantfile: Path = VAGRANTFILE, cwd: Path = REPO
              ) -> subprocess.CompletedProcess[str]:
    """ruby in `cwd`: `before`, then the Vagrantfile loaded, then `code`."""
    program = f"{before}\nload {json.dumps(str(vagrantfile))}\n{code}"
    return subprocess.run(["ruby", "-rjson", "-e", program, *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


def _ruby(code: str, *args: str, env: dict[str, str] | None = None,
          vagrantfile: Path = VAGRANTFILE, cwd: Path = REPO) -> str:
    """Run `code` with the Vagrantfile loaded as a library (no Vagrant.configure)."""
    result = _run_ruby(code, *args, vagrantfile=vagrantfile, cwd=cwd, env={
        "PATH": os.environ["PATH"], "LABCTL_VAGRANTFILE_LIBRARY": "1", **(env or {})})
    assert result.returncode == 0, result.stderr
    return result.stdout


def _plan_file(tmp_path: Path, lab: Lab, labdir: Path | None = None,
               env: dict[str, str] | None = None) -> Path:
    path = tmp_path / "vagrant-lab.json"
    path.write_text(vagrant_plan.document(lab, labdir, env or {"HOME": str(tmp_path)}))
    return path


# --------------------------------------------------------------------------- what Vagrant gets

# Vagrant's configuration DSL, recorded: every setter (path=, value), every call (path,
# args, keywords). Getters give back what was set (`lv.driver == "qemu"`).
FAKE_VAGRANT_DSL = """
module Vagrant
  LOG = []
  class Rec
    def initialize(path)
      @path = path
      @values = {}
    end

    def respond_to_missing?(*) = true

    def []=(key, value)
      LOG << ["#{@path}[#{key}]=", value]
    end

    def method_missing(name, *args, **kw, &block)
      key = name.to_s
      if key.end_with?("=")
        @values[key.chomp("=")] = args[0]
        return LOG << ["#{@path}.#{key}", args[0]]
      end
      return @values[key] ||= Rec.new("#{@path}.#{key}") if args.empty? && kw.empty? && !block
      LOG << ["#{@path}.#{key}", args, kw]
      case key
      when "define" then block&.call(Rec.new(args[0]))
      when "provider"  # node1:libvirt, node1:libvirt.override
        at = "#{@path.split('.').first}:#{args[0]}"
        block&.call(Rec.new(at), Rec.new("#{at}.override"))
      end
      nil
    end
  end
  def self.configure(_version) = yield(Rec.new("config"))
end
"""


def _configure(env: dict[str, str], vagrantfile: Path = VAGRANTFILE) -> list[Any]:
    """What the Vagrantfile tells Vagrant, under `env` (no LABCTL_VAGRANTFILE_LIBRARY)."""
    result = _run_ruby("puts JSON.generate(Vagrant::LOG)", before=FAKE_VAGRANT_DSL,
                       env=env, vagrantfile=vagrantfile)
    assert result.returncode == 0, result.stderr
    log: list[Any] = json.loads(result.stdout)
    return log


def _setters(log: list[Any]) -> dict[str, Any]:
    return {entry[0]: entry[1] for entry in log if len(entry) == 2}


def _calls(log: list[Any], path: str) -> list[tuple[list[Any], dict[str, Any]]]:
    return [(entry[1], entry[2]) for entry in log if len(entry) == 3 and entry[0] == path]


@needs_ruby
def test_vagrant_gets_the_values_labctl_resolved(tmp_path: Path) -> None:
    """labctl's way (LABCTL_LAB_JSON, labctl's boxes, TCG): two-node's real addresses,
    MACs, networks, boxes, memory and node settings reach Vagrant as labctl made them."""
    lab = load_lab(REPO / "topologies" / "two-node.yaml")
    labdir = tmp_path / "labs" / "two-node"
    settings = {"HOME": str(tmp_path), "LABCTL_LIBVIRT_DRIVER": "qemu",
                "LABCTL_BOXES": json.dumps({"node1": "labctl/trixie-a",
                                            "node2": "labctl/trixie-b"})}
    plan_file = _plan_file(tmp_path, lab, labdir, settings)
    log = _configure({"PATH": os.environ["PATH"], "LABCTL_LAB_JSON": str(plan_file)})
    set_ = _setters(log)
    assert [args[0] for args, _ in _calls(log, "config.vm.define")] == ["node1", "node2"]
    for node, mac, address, box in (("node1", "02:5f:eb:d7:01:01", "10.77.1.1/24", "a"),
                                    ("node2", "02:5f:eb:d7:02:01", "10.77.1.2/24", "b")):
        index = node[-1]
        assert set_[f"{node}.vm.hostname="] == node
        assert set_[f"{node}.vm.box="] == "bento/debian-13"  # trixie has a public box
        assert set_[f"{node}:libvirt.override.vm.box="] == f"labctl/trixie-{box}"
        assert set_[f"{node}:libvirt.override.vm.hostname="] is None  # the box's boot sets it
        assert set_[f"{node}:virtualbox.override.vm.box="] == "bento/debian-13"
        networks = _calls(log, f"{node}.vm.network")
        assert networks == [(["private_network"], {
            "auto_config": False, "mac": mac.replace(":", ""),
            "virtualbox__intnet": "labctl-two-node-link1", "virtualbox__nic_type": "virtio",
            "libvirt__network_name": "labctl-two-node-link1",
            "libvirt__forward_mode": "veryisolated", "libvirt__dhcp_enabled": False,
            "libvirt__mtu": 1500})]
        assert set_[f"{node}:libvirt.memory="] == 512 and set_[f"{node}:libvirt.cpus="] == 1
        assert set_[f"{node}:libvirt.driver="] == "qemu"
        assert set_[f"{node}:libvirt.cpu_model="] == "qemu64"  # TCG
        assert set_[f"{node}:libvirt.default_prefix="] == "labctl-two-node_"
        assert set_[f"{node}:libvirt.management_network_name="] == "labctl-two-node-mgmt"
        assert set_[f"{node}:libvirt.management_network_address="] == "192.168.205.0/24"
        mgmt_mac = set_[f"{node}:libvirt.management_network_mac="]
        assert re.fullmatch(rf"52:54:00(:[0-9a-f]{{2}}){{2}}:0{index}", mgmt_mac)
        assert set_[f"{node}:libvirt.cmd_line="].endswith(
            f"labctl.node={node} labctl.mgmt={mgmt_mac}")
        assert _calls(log, f"{node}:libvirt.serial") == [
            ([], {"type": "file", "source": {"path": str(labdir / f"console-{node}.log")}})]
        assert set_[f"{node}:virtualbox.name="] == f"labctl-two-node-{node}"
        assert set_[f"{node}:vmware_desktop.vmx[memsize]="] == "512"
        provisions = _calls(log, f"{node}.vm.provision")
        assert [args[0] for args, _ in provisions] == [
            "labctl-packages", "labctl-code", "labctl-node"]  # rxe: no siw step
        node_script = provisions[2][1]["inline"]
        assert f"LABCTL_IFACES='eth1,{mac},{address},1500'" in node_script
        assert f"LABCTL_NODE='{node}'" in node_script
        assert "LABCTL_RDMA_DEV='rxe0'" in node_script
        assert f"[Match]\nMACAddress={mac}\n" in node_script


@needs_ruby
@pytest.mark.parametrize("topology", PLANNED, ids=lambda p: p.name)
def test_vagrant_gets_exactly_the_plan(topology: Path, tmp_path: Path) -> None:
    """Every shipped topology: each value Vagrant gets is the plan's, none made up."""
    lab = load_lab(topology)
    plan = vagrant_plan.plan(lab, None, {"HOME": str(tmp_path)})
    log = _configure({"PATH": os.environ["PATH"],
                      "LABCTL_LAB_JSON": str(_plan_file(tmp_path, lab))})
    set_ = _setters(log)
    assert [args[0] for args, _ in _calls(log, "config.vm.define")] == [
        n.name for n in lab.nodes]
    for node, planned in zip(lab.nodes, plan["nodes"], strict=True):
        assert set_[f"{node.name}.vm.box="] == planned["boxes"]["default"]
        got = [(kw["mac"], kw["libvirt__network_name"], kw["libvirt__mtu"])
               for _, kw in _calls(log, f"{node.name}.vm.network")]
        assert got == [(i.mac.replace(":", ""),
                        f"labctl-{lab.name}-{lab.segments[i.segment].name}", i.mtu)
                       for i in node.interfaces]
        steps = [args[0] for args, _ in _calls(log, f"{node.name}.vm.provision")]
        assert ("labctl-siw" in steps) == (node.rdma == "siw")


@needs_ruby
@pytest.mark.parametrize("given", ["", "topologies/siw-pair.yaml", "three-node-switch"])
def test_plain_vagrant_up_asks_labctl(given: str, tmp_path: Path) -> None:
    """Without LABCTL_LAB_JSON the Vagrantfile runs `labctl validate --json --vagrant` on
    LABCTL_TOPOLOGY (a path relative to the checkout, or a shipped name; two-node without)
    and takes its JSON as it is."""
    env = _plain_env(tmp_path, LABCTL_COMMAND=LABCTL_COMMAND, LABCTL_TOPOLOGY=given)
    ruby = json.loads(_ruby("puts JSON.generate(LabctlVagrant.load_lab)", env=env))
    # what the Vagrantfile gives labctl: a file beside it, one relative to the working
    # directory (the checkout, here), or the name as it is
    passed = {"": str(REPO / "labctl" / "data" / "topologies" / "two-node.yaml"),
              "topologies/siw-pair.yaml": str(REPO / "topologies" / "siw-pair.yaml"),
              "three-node-switch": "three-node-switch"}[given]
    lab = load_lab(find_topology(passed))
    assert ruby == json.loads(vagrant_plan.document(lab, None, env))
    assert ruby["vagrant"]["nodes"][0]["networks"][0]["ipv4"] == "10.77.1.1/24"
    assert ruby["vagrant"]["nodes"][0]["boxes"]["libvirt"] == "debian/trixie64"  # no labctl box


@needs_ruby
def test_lab_json_wins_over_the_topology(tmp_path: Path) -> None:
    lab = load_lab(REPO / "topologies" / "three-node-switch.yaml")
    out = _ruby("puts JSON.generate(LabctlVagrant.load_lab)", env={
        "LABCTL_LAB_JSON": str(_plan_file(tmp_path, lab)),
        "LABCTL_TOPOLOGY": str(REPO / "topologies" / "two-node.yaml")})
    assert json.loads(out)["name"] == "three-node-switch"
    assert [n["name"] for n in json.loads(out)["vagrant"]["nodes"]] == ["node1", "node2", "node3"]


@needs_ruby
def test_a_lab_json_without_a_plan_is_refused(tmp_path: Path) -> None:
    """`labctl validate --json` alone (no --vagrant) has no plan: the Vagrantfile says how
    to make one instead of working it out."""
    (tmp_path / "lab.json").write_text(load_lab(REPO / "topologies" / "two-node.yaml").to_json())
    result = _run_ruby("LabctlVagrant.load_lab", env={
        "PATH": os.environ["PATH"], "LABCTL_VAGRANTFILE_LIBRARY": "1",
        "LABCTL_LAB_JSON": str(tmp_path / "lab.json")})
    assert result.returncode != 0
    assert "gave no Vagrant plan" in result.stderr
    assert "labctl validate --json --vagrant TOPOLOGY" in result.stderr


@needs_ruby
def test_plain_vagrant_up_without_labctl_says_what_to_install(tmp_path: Path) -> None:
    """No LABCTL_COMMAND, no labctl on PATH, no virtualenv in the checkout."""
    copy = tmp_path / "checkout" / "labctl" / "data" / "Vagrantfile"
    copy.parent.mkdir(parents=True)
    shutil.copy(VAGRANTFILE, copy)
    empty = tmp_path / "bin"
    empty.mkdir()
    result = subprocess.run(
        [shutil.which("ruby") or "ruby", "-e", f"load {json.dumps(str(copy))}\n"
         "LabctlVagrant.load_lab"],
        env={"PATH": str(empty), "LABCTL_VAGRANTFILE_LIBRARY": "1"},
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0
    assert "labctl not found" in result.stderr and "LABCTL_COMMAND" in result.stderr


@needs_ruby
def test_labctls_refusal_reaches_vagrant(tmp_path: Path) -> None:
    """A lab the Vagrantfile cannot build: labctl's error (exit 2), word for word."""
    routed = next(t for t in ROUTED if "router: true" in t.read_text())
    env = _plain_env(tmp_path, LABCTL_COMMAND=LABCTL_COMMAND, LABCTL_TOPOLOGY=str(routed),
                     LABCTL_VAGRANTFILE_LIBRARY="1")
    result = _run_ruby("LabctlVagrant.load_lab", env=env)
    assert result.returncode != 0
    assert "(exit 2)" in result.stderr
    assert "routers and routes are not supported by the Vagrantfile" in result.stderr
    assert "hint: use provider qemu or docker" in result.stderr


@needs_ruby
def test_the_top_level_vagrantfile_is_the_packaged_one(tmp_path: Path) -> None:
    """The checkout's Vagrantfile only loads labctl/data/Vagrantfile: topologies not in the
    working directory are found beside that one (labctl/data/topologies, so also where git
    made no `topologies` link)."""
    assert len(TOP_VAGRANTFILE.read_text().splitlines()) < 10
    out = _ruby("puts LabctlVagrant.topology({})\n"
                "puts LabctlVagrant.topology({'LABCTL_TOPOLOGY' => 'topologies/siw-pair.yaml'})",
                vagrantfile=TOP_VAGRANTFILE, cwd=tmp_path)
    data = REPO / "labctl" / "data" / "topologies"
    assert out.splitlines() == [str(data / "two-node.yaml"), str(data / "siw-pair.yaml")]
    # what Vagrant gets through the pointer is what it gets from the packaged file
    lab = load_lab(REPO / "topologies" / "siw-pair.yaml")
    env = {"PATH": os.environ["PATH"], "LABCTL_LAB_JSON": str(_plan_file(tmp_path, lab))}
    assert _configure(env, TOP_VAGRANTFILE) == _configure(env)


# --------------------------------------------------------------------------- one package list


def test_the_plan_carries_the_image_builders_package_list(tmp_path: Path) -> None:
    lab = load_lab(REPO / "topologies" / "two-node.yaml")
    packages = vagrant_plan.plan(lab, None, {"HOME": str(tmp_path)})["packages"]
    assert packages == list(node_packages())
    assert "rdma-core" in packages and "ibverbs-utils" in packages


@needs_ruby
def test_provisioning_installs_every_listed_package(tmp_path: Path) -> None:
    lab = load_lab(REPO / "topologies" / "two-node.yaml")
    log = _configure({"PATH": os.environ["PATH"],
                      "LABCTL_LAB_JSON": str(_plan_file(tmp_path, lab))})
    script = _calls(log, "node1.vm.provision")[0][1]["inline"]
    install = next(line for line in script.splitlines() if "apt-get install" in line)
    assert install.split()[-len(node_packages()) :] == list(node_packages())


def test_vagrantfile_does_not_copy_the_package_list() -> None:
    text = VAGRANTFILE.read_text()
    assert node_packages()
    for package in node_packages():
        assert not re.search(rf"(?<![\w.-]){re.escape(package)}(?![\w-])", text), (
            f"{package} is named in the Vagrantfile: the list lives in "
            "labctl/images/node-packages.txt only"
        )


# --------------------------------------------------------------------------- scripts


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if shutil.which("ruby") is None:
        pytest.skip("ruby not installed")
    lab = load_lab(REPO / "tests/unit/topology/input/interface-order.yaml")
    plan_file = _plan_file(tmp_path_factory.mktemp("plan"), lab)
    out = _ruby(
        """
        lab = LabctlVagrant.load_lab; plan = lab['vagrant']
        rxe, siw = plan['nodes'][0], plan['nodes'][0].merge('rdma' => 'siw')
        puts JSON.generate(
          'packages-rxe' => LabctlVagrant.packages_script(rxe, plan['packages']),
          'packages-siw' => LabctlVagrant.packages_script(siw, plan['packages']),
          'siw' => LabctlVagrant.siw_script,
          'code' => LabctlVagrant.code_script(plan['node_code'], plan['node_code_dir']),
          'node' => LabctlVagrant.node_script(rxe, plan['node_init']),
          'node-up' => LabctlVagrant.node_up_script(plan['node_init']),
        )
        """,
        env={"LABCTL_LAB_JSON": str(plan_file)},
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


def test_node_script_installs_a_boot_unit_with_labctls_node_env(scripts: dict[str, str]) -> None:
    node = scripts["node"]
    assert "/etc/systemd/system/labctl-node.service" in node
    assert "systemctl enable labctl-node.service" in node
    assert "WantedBy=multi-user.target" in node
    assert "ExecStart=/usr/local/sbin/labctl-node-up start" in node
    lab = load_lab(REPO / "tests/unit/topology/input/interface-order.yaml")
    expected = qemu_node_env(lab, lab.nodes[0])
    del expected["LABCTL_MGMT_MAC"]  # Vagrant's own management NIC
    written = node.split("cat > /etc/labctl/node.env.new <<'LABCTL_EOF'\n")[1].split(
        "LABCTL_EOF\n")[0]
    assert written == "".join(f"{k}='{v}'\n" for k, v in sorted(expected.items()))
    assert "LABCTL_RDMA_DEV='rxe0'" in written


def test_node_up_script_is_labctls_node_init(scripts: dict[str, str]) -> None:
    """labctl-node-up is labctl's one bring-up script, as kind vagrant."""
    shared = (REPO / "labctl" / "nodeside" / "node-init.sh").read_text().splitlines(True)
    while shared[0].startswith("#"):
        shared.pop(0)
    assert scripts["node-up"] == (
        "#!/bin/sh\n# labctl-node-up start|stop (installed by the rdma-lab Vagrantfile from "
        "labctl/nodeside/node-init.sh)\nLABCTL_NODE_KIND=vagrant\n" + "".join(shared))


def test_code_script_installs_the_node_side_code(scripts: dict[str, str], tmp_path: Path) -> None:
    dest = tmp_path / "opt" / "labctl"
    script = scripts["code"].replace("/opt/labctl", str(dest))
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
        [sys.executable, "-c", "import labctl.nodeside.identity, labctl.verbs"],
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
        "PYTHONPATH": str(REPO),  # plain `vagrant up` runs labctl (LABCTL_COMMAND)
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
@pytest.mark.parametrize("topology", PLANNED, ids=lambda p: p.name)
def test_vagrant_validate_labctl_labs(
    topology: Path, vagrant_env: dict[str, str], validate_args: list[str], tmp_path: Path
) -> None:
    """What `labctl up` hands to vagrant: the lab and its plan, with labctl's box."""
    lab = load_lab(topology)
    labdir = tmp_path / "lab"
    env = {"HOME": str(tmp_path), "LABCTL_LIBVIRT_DRIVER": "qemu",
           "LABCTL_BOXES": json.dumps({n.name: "labctl/trixie-k" for n in lab.nodes})}
    plan_file = _plan_file(tmp_path, lab, labdir, env)
    _validate({**vagrant_env, "LABCTL_LAB_JSON": str(plan_file)}, validate_args)


@needs_vagrant
def test_vagrant_validate_plain(vagrant_env: dict[str, str], validate_args: list[str]) -> None:
    """Plain `vagrant up` (default topology) and a LABCTL_TOPOLOGY one: labctl asked."""
    env = {**vagrant_env, "LABCTL_COMMAND": LABCTL_COMMAND}
    _validate(env, validate_args)
    siw = {**env, "LABCTL_TOPOLOGY": "topologies/siw-pair.yaml"}  # relative to the repo
    _validate(siw, validate_args)


@needs_vagrant
def test_vagrant_validate_reports_a_bad_lab(vagrant_env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nnodes: {a: {}}\nlinks:\n  - endpoints: [a:eth1, b:eth1]\n")
    env = {**vagrant_env, "LABCTL_TOPOLOGY": str(bad), "LABCTL_COMMAND": LABCTL_COMMAND}
    result = _vagrant(env, "validate", "--ignore-provider")
    assert result.returncode != 0
    said = result.stdout + result.stderr
    assert "validate --json --vagrant" in said and "failed (exit 2)" in said
    assert "node 'b' is not defined under nodes" in said


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


def test_check_host_refuses_what_the_vagrantfile_cannot_build(tmp_path: Path, fake: Fake) -> None:
    """`labctl up --provider vagrant` of a routed topology: refused before anything is made
    (exit 2), not left to a Vagrantfile that would build the lab without its routes."""
    with pytest.raises(UsageError, match="routers and routes are not supported") as exc:
        _provider(tmp_path, fake, "routed.yaml").check_host()
    assert exc.value.exit_code == 2
    assert fake.calls() == []  # not even `vagrant plugin list`


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
    assert NODE_INIT not in stage1
    assert f"/usr/bin/tini -- {box.STAGE2}" in stage1
    # everything else of the image's stage 1 is kept (root on /dev/vda, payload copy)
    assert stage1.replace(box.STAGE2, NODE_INIT) == image_init
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


@needs_ruby
def test_vagrant_provision_skips_packages_on_labctls_image() -> None:
    """labctl's image has the packages (and no network to fetch any): the packages and siw
    steps stop at once there, and the node step runs the bring-up without systemd."""
    code = ("node = {'name' => 'n', 'rdma' => 'siw', 'networks' => []}\n"
            "puts LabctlVagrant.packages_script(node, ['rdma-core'])\n"
            "puts '----'\nputs LabctlVagrant.siw_script")
    packages, siw = _ruby(code).split("----\n")
    for script in (packages, siw):
        guard = script.index("/etc/labctl-kernel")
        assert guard < script.index("exit 0") < script.index("apt-get" if script is packages
                                                               else "mktemp")
