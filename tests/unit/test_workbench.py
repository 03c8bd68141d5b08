"""The workbench pieces without a VM: the topology's packages/mounts (and up --mount),
what the providers make of them, `labctl cp`'s arguments, and `run custom`'s placeholders
(injection attempts included). Live checks: tests/integration/test_workbench.py."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from labctl.data.recipes import DEV_PACKAGES, image_label, node_recipe, recipe
from labctl.errors import LabctlError, UsageError
from labctl.images.builder import Image, image_key
from labctl.lab import lifecycle
from labctl.lab.transfer import parse_copy, split_location
from labctl.providers import docker as docker_provider
from labctl.providers import provider_for
from labctl.providers.base import UnsupportedError
from labctl.providers.qemu import plan_lab
from labctl.runners.custom import PLACEHOLDERS, custom_spec, substitute
from labctl.runners.example_spec import Endpoint, RunContext
from labctl.store.labdir import LabDir
from labctl.store.state import LabState, Phase
from labctl.topology.errors import TopologyError
from labctl.topology.load import parse_topology, resolve
from labctl.topology.resolved import Lab
from labctl.topology.workbench import with_extra_mounts
from tests.unit.clirun import run_main

BASE = """name: wb
defaults: {image: trixie-dev, packages: [iperf3], mounts: ["./src:/work"]}
nodes:
  node1: {packages: [gdb, bpftrace], mounts: ["./src:/data:ro"]}
  node2: {}
links:
  - endpoints: [node1:eth1, node2:eth1]
"""


def _lab(tmp_path: Path, text: str = BASE) -> Lab:
    (tmp_path / "src").mkdir(exist_ok=True)
    topo = tmp_path / "t.yaml"
    topo.write_text(text)
    from labctl.topology.load import load_lab

    return load_lab(topo)


# --------------------------------------------------------------------------- topology


def test_defaults_and_node_lists_add_up(tmp_path: Path) -> None:
    lab = _lab(tmp_path)
    node1, node2 = lab.nodes
    assert node1.packages == ("bpftrace", "gdb", "iperf3")
    assert node2.packages == ("iperf3",)
    src = str(tmp_path / "src")
    assert [(m.source, m.target, m.readonly) for m in node1.mounts] == [
        (src, "/work", False), (src, "/data", True)]
    assert [m.target for m in node2.mounts] == ["/work"]


def test_lab_json_round_trips_and_omits_unused_keys(tmp_path: Path) -> None:
    lab = _lab(tmp_path)
    assert Lab.from_json(lab.to_json()) == lab
    plain = _lab(tmp_path, "name: p\nnodes: {a: {rdma: none}}\n")
    node = json.loads(plain.to_json())["nodes"][0]
    assert "packages" not in node and "mounts" not in node  # old lab.json files unchanged
    assert Lab.from_json(plain.to_json()) == plain


def test_a_topology_given_as_text_finds_sources_from_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path)
    text = "name: t\nnodes:\n  a: {rdma: none, mounts: ['here:/here']}\n"
    lab = resolve(parse_topology(text), "<text>")
    assert lab.nodes[0].mounts[0].source == str(tmp_path / "here")


def test_sources_may_hold_colons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a:b").mkdir()
    monkeypatch.chdir(tmp_path)
    lab = resolve(parse_topology("name: t\nnodes:\n  a: {rdma: none, mounts: ['a:b:/x:ro']}\n"),
                  "<text>")
    mount = lab.nodes[0].mounts[0]
    assert (mount.source, mount.target, mount.readonly) == (str(tmp_path / "a:b"), "/x", True)


@pytest.mark.parametrize(("value", "message"), [
    ("Gdb", "'Gdb' is not a Debian package name"),
    ("g", "'g' is not a Debian package name"),
    ("gdb;rm", "'gdb;rm' is not a Debian package name"),
    ("-gdb", "'-gdb' is not a Debian package name"),
    ("gdb strace", "'gdb strace' is not a Debian package name"),
])
def test_package_names_follow_debian_policy(value: str, message: str) -> None:
    with pytest.raises(TopologyError) as info:
        parse_topology(f"name: t\ndefaults: {{packages: [{json.dumps(value)}]}}\n"
                       "nodes: {a: {rdma: none}}\n")
    assert info.value.reason == message
    assert info.value.field == "defaults.packages[0]"


@pytest.mark.parametrize("value", ["libibverbs-dev", "g++", "python3.11", "libstdc++6"])
def test_real_package_names_pass(value: str) -> None:
    topology = parse_topology(
        f"name: t\ndefaults: {{packages: ['{value}']}}\nnodes: {{a: {{rdma: none}}}}\n")
    assert topology.defaults.packages == [value]


@pytest.mark.parametrize(("mount", "message"), [
    ("./src:/work/", "the node path '/work/' must be a normalized absolute path"),
    ("./src:/we ird", "the node path '/we ird' must be a normalized absolute path"),
    ("./src:/a,b", "the node path '/a,b' must be a normalized absolute path"),
    ("./src:/", "the node path '/' must be a normalized absolute path"),
    ("./src:/tmp", "/tmp is reserved in the node"),
    ("./src:/root", "/root is reserved in the node"),
    ("./src:/root/.ssh/x", "/root/.ssh/x is reserved in the node"),
    ("./src:/proc/x", "/proc/x is reserved in the node"),
    ("./src:/work:rx", "the node path 'rx' is not absolute"),
    (":/work", "':/work' is not SRC:DST or SRC:DST:ro"),
    ("./src:/work\n", "'./src:/work\\n' holds a control character"),
])
def test_bad_mounts_are_refused(tmp_path: Path, mount: str, message: str) -> None:
    (tmp_path / "src").mkdir()
    topo = tmp_path / "t.yaml"
    topo.write_text(f"name: t\nnodes:\n  a: {{rdma: none, mounts: [{json.dumps(mount)}]}}\n")
    from labctl.topology.load import load_lab

    with pytest.raises(TopologyError) as info:
        load_lab(topo)
    assert info.value.reason.startswith(message), info.value.reason
    assert info.value.exit_code == 2


def test_up_mount_adds_to_every_node(tmp_path: Path) -> None:
    lab = _lab(tmp_path)
    (tmp_path / "more").mkdir()
    extended = with_extra_mounts(lab, ("more:/more:ro",), tmp_path)
    for node in extended.nodes:
        assert node.mounts[-1].target == "/more" and node.mounts[-1].readonly
        assert node.mounts[-1].source == str(tmp_path / "more")
    with pytest.raises(UsageError, match="node node1 already mounts a folder at /work"):
        with_extra_mounts(lab, ("more:/work",), tmp_path)
    with pytest.raises(UsageError, match="--mount 'nope:/x': the host folder 'nope' does not"):
        with_extra_mounts(lab, ("nope:/x",), tmp_path)
    assert with_extra_mounts(lab, (), tmp_path) is lab


# --------------------------------------------------------------------------- images


def test_packages_make_an_image_of_their_own() -> None:
    base = recipe("trixie")
    extra = node_recipe("trixie", ("strace", "gdb", "gdb"))
    assert extra.packages == (*base.packages, "gdb", "strace")
    assert image_key(extra, None) != image_key(base, None)
    # order and duplicates do not make another image; packages already in it add nothing
    assert image_key(node_recipe("trixie", ("gdb", "strace")), None) == image_key(extra, None)
    assert node_recipe("trixie", ("rdma-core",)) == base
    assert image_label("trixie", ("strace", "gdb")) == "trixie+gdb,strace"
    assert image_label("trixie") == "trixie"


def test_dev_image_is_the_base_plus_the_toolchain() -> None:
    base, dev = recipe("trixie"), recipe("trixie-dev")
    assert dev.packages == (*base.packages, *DEV_PACKAGES)
    assert {"gcc", "make", "pkg-config", "libibverbs-dev", "librdmacm-dev", "python3-pyverbs",
            "gdb", "strace"} <= set(dev.packages)
    assert (dev.suite, dev.kernel_suite) == (base.suite, base.kernel_suite)


# --------------------------------------------------------------------------- providers


def _image() -> Image:
    return Image(Path("/cache/img"), Path("/cache/img/vmlinuz"), Path("/cache/img/initrd.cpio"),
                 Path("/cache/img/root.ext4"), {})


def test_qemu_plan_shares_folders_over_9p(tmp_path: Path) -> None:
    text = BASE.replace("./src:/data:ro", "./a,b:/data:ro")
    (tmp_path / "a,b").mkdir()
    lab = _lab(tmp_path, text)
    dirs = {n.name: tmp_path / n.name for n in lab.nodes}
    images = {image_label(n.image, n.packages): _image() for n in lab.nodes}
    plan = plan_lab(lab, dirs, images, "tcg", {"node1": 1, "node2": 2})
    node1, node2 = plan.nodes
    fsdevs = [node1.argv[i + 1] for i, a in enumerate(node1.argv) if a == "-fsdev"]
    assert fsdevs == [
        f"local,id=fs0,path={tmp_path}/src,security_model=none,multidevs=remap",
        # , doubled
        f"local,id=fs1,path={tmp_path}/a,,b,security_model=none,multidevs=remap,readonly=on",
    ]
    assert "virtio-9p-pci,fsdev=fs1,mount_tag=labctl1" in node1.argv
    assert node1.env["LABCTL_MOUNTS"] == "labctl0,/work,rw labctl1,/data,ro"
    assert node2.env["LABCTL_MOUNTS"] == "labctl0,/work,rw"
    plain = _lab(tmp_path, "name: p\nnodes: {a: {rdma: none}}\n")
    plain_plan = plan_lab(plain, {"a": tmp_path / "a"}, {"trixie": _image()}, "tcg", {"a": 1})
    assert "LABCTL_MOUNTS" not in plain_plan.nodes[0].env
    assert "-fsdev" not in plain_plan.nodes[0].argv


def test_node_init_mounts_each_share(tmp_path: Path) -> None:
    script = (Path(__file__).parents[2] / "labctl/nodeside/node-init.sh").read_text()
    assert 'mount -t 9p \\\n            -o "trans=virtio,version=9p2000.L,msize=262144,$mode"' \
        in script
    assert 'must "modprobe 9pnet_virtio 9p (kernel $(uname -r))" modprobe -a 9pnet_virtio 9p' \
        in script


def test_docker_binds_folders_with_the_local_engine(tmp_path: Path) -> None:
    lab = dataclasses.replace(_lab(tmp_path), provider="docker")
    tags = {image_label(n.image, n.packages): f"tag-{n.name}" for n in lab.nodes}
    plan = docker_provider.plan_lab(lab, tags, "", "labctl-owner:test")
    create = plan.containers[0].create
    assert create["image"] == "tag-node1"
    containers = pytest.importorskip("docker.models.containers")
    host_config = containers._create_container_args({**create, "version": "1.45"})[
        "host_config"]
    src = str(tmp_path / "src")
    # one folder in two places, one of them read-only
    assert host_config["Mounts"] == [
        {"Type": "bind", "Source": src, "Target": "/work", "ReadOnly": False},
        {"Type": "bind", "Source": src, "Target": "/data", "ReadOnly": True}]
    assert host_config["Binds"] == ["/dev/infiniband:/dev/infiniband:rw"]


def test_docker_host_vm_binds_folders_from_its_share(tmp_path: Path) -> None:
    """With the Docker host VM the container mounts the VM's path of the folder: labctl's
    bind mount of it under the share the VM sees (read-only stays read-only)."""
    from labctl.dockerhost.vm import VM_SHARE

    lab = dataclasses.replace(_lab(tmp_path), provider="docker")
    tags = {image_label(n.image, n.packages): f"tag-{n.name}" for n in lab.nodes}
    plan = docker_provider.plan_lab(lab, tags, "", "labctl-owner:test", vm_engine=True)
    assert plan.containers[0].create["mounts"] == [
        {"Type": "bind", "Source": f"{VM_SHARE}/{lab.name}/node1-0", "Target": "/work",
         "ReadOnly": False},
        {"Type": "bind", "Source": f"{VM_SHARE}/{lab.name}/node1-1", "Target": "/data",
         "ReadOnly": True}]
    assert docker_provider.vm_share_point(lab.name, "node1", 1).name == "node1-1"


def test_docker_host_vm_without_the_share_is_named(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A VM started by an older labctl (no share) is refused with a hint to restart it."""
    monkeypatch.setattr("shutil.which", lambda _name: "/usr/bin/x")
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr(docker_provider.DockerHostVM, "running", lambda _self: True)
    monkeypatch.setattr(docker_provider.DockerHostVM, "shares_host_folders",
                        lambda _self: False)
    lab = dataclasses.replace(_lab(tmp_path), provider="docker",
                              provider_options={"engine": "vm"})
    provider = provider_for(lab, LabDir(lab.name))
    with pytest.raises(LabctlError, match="started without the host-folder share") as info:
        provider.check_host()
    assert "labctl docker-host down" in info.value.hint


def test_docker_host_vm_shares_labctls_folder(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The VM's qemu exports share_dir() over virtio-9p (multidevs=remap) and its boot
    mounts it at VM_SHARE."""
    from labctl.dockerhost import vm

    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "labs"))
    lab = vm._vm_lab(1024, 1)
    machine = vm.node_machine(vm.VM_LAB, vm.VM_NODE, tmp_path / "engine")
    argv = vm.vm_argv(lab, machine, _image(), "tcg", 2222, tmp_path / "disk")
    fsdev = argv[argv.index("-fsdev") + 1]
    assert f"path={vm.share_dir()}," in fsdev and "multidevs=remap" in fsdev
    assert "readonly" not in fsdev
    assert vm.mounts_env(lab.nodes[0]) == {"LABCTL_MOUNTS": f"labctl0,{vm.VM_SHARE},rw"}
    # under TCG its translation cache is larger than a node's (Go programs: docker exec)
    assert argv[argv.index("-accel") + 1] == "tcg,tb-size=256"
    kvm = vm.vm_argv(lab, machine, _image(), "kvm", 2222, tmp_path / "disk")
    assert kvm[kvm.index("-accel") + 1] == "kvm"


@pytest.mark.parametrize(("vagrant_provider", "box", "why"), [
    ("virtualbox", "", "with the Vagrant provider virtualbox"),
    ("libvirt", "debian/trixie64", "with LABCTL_VAGRANT_BOX (a public box)"),
])
def test_vagrant_refuses_the_workbench_keys_without_labctls_box(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vagrant_provider: str, box: str,
        why: str) -> None:
    monkeypatch.setenv("LABCTL_VAGRANT_BOX", box)
    lab = dataclasses.replace(_lab(tmp_path), provider="vagrant")
    provider = provider_for(lab, LabDir(lab.name))
    provider.vagrant_provider = vagrant_provider  # type: ignore[attr-defined]
    with pytest.raises(UnsupportedError) as info:
        provider.check_workbench()  # type: ignore[attr-defined]
    assert info.value.exit_code == 2
    assert "mounts (host folders) (nodes node1, node2)" in info.value.message
    assert "packages (nodes node1, node2)" in info.value.message
    assert "image trixie-dev" in info.value.message
    assert why in info.value.message
    assert "LABCTL_VAGRANT_PROVIDER=libvirt" in info.value.hint


def test_vagrant_with_labctls_boxes_takes_the_workbench_keys(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LABCTL_VAGRANT_BOX", raising=False)
    lab = dataclasses.replace(_lab(tmp_path), provider="vagrant")
    provider = provider_for(lab, LabDir(lab.name))
    provider.vagrant_provider = "libvirt"  # type: ignore[attr-defined]
    assert provider.labctl_boxes()  # type: ignore[attr-defined]
    # what the refusal above names, all asked for here, and taken
    assert [n.image for n in lab.nodes] == ["trixie-dev", "trixie-dev"]
    assert all(n.mounts and n.packages for n in lab.nodes)
    provider.check_workbench()  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- labctl cp


@pytest.mark.parametrize(("src", "dst", "expected"), [
    ("./src", "node1:/root/src", ("node1", "/root/src", "./src", True)),
    ("node2:/var/log/x.log", ".", ("node2", "/var/log/x.log", ".", False)),
    ("/abs/file", "n-1:/tmp/", ("n-1", "/tmp/", "/abs/file", True)),
    ("./node1:odd", "node1:/x", ("node1", "/x", "./node1:odd", True)),
])
def test_cp_arguments(src: str, dst: str, expected: tuple[str, str, str, bool]) -> None:
    request = parse_copy(src, dst)
    assert (request.node, request.node_path, request.host_path, request.to_node) == expected


@pytest.mark.parametrize(("src", "dst", "message"), [
    ("a", "b", "one of SRC and DST must be NODE:PATH"),
    ("node1:/a", "node2:/b", "copying from node to node is not supported"),
    ("a", "node1:rel/path", "DST: the node path 'rel/path' is not absolute"),
    ("node1:", "a", "SRC: the node path is empty"),
    ("node1:/", "a", "SRC: cannot copy the node's whole root directory"),
    ("a", "node1:/x\ny", "DST: the node path '/x\\ny' holds a control character"),
    ("", "node1:/x", "SRC: the host path is empty"),
    ("node1:/x", "", "DST: the host path is empty"),
])
def test_cp_bad_arguments_exit_2(src: str, dst: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_copy(src, dst)
    assert info.value.message == message
    assert info.value.exit_code == 2


def test_cp_location_split() -> None:
    assert split_location("node1:/x") == ("node1", "/x")
    assert split_location("Node1:/x") == (None, "Node1:/x")  # not a node name
    assert split_location("/a:b") == (None, "/a:b")


# --------------------------------------------------------------------------- run custom


def _ctx(port: int | None = None) -> RunContext:
    server = Endpoint("node1", "rxe0", "rxe", 1, "10.77.1.1")
    client = Endpoint("node2", "rxe1", "rxe", 3, "10.77.1.2")
    return RunContext(server, client, {"port": port})


def test_placeholders_are_filled_per_side() -> None:
    spec = custom_spec("srv -d {device} -g {gid_index} -p {port}",
                       "cli -d {device} -g {gid_index} {server_ip} {client_ip}")
    ctx = _ctx(port=4000)
    assert spec.server_argv(ctx) == ["sh", "-c", "srv -d rxe0 -g 1 -p 4000"]
    assert spec.client_argv(ctx) == ["sh", "-c", "cli -d rxe1 -g 3 10.77.1.1 10.77.1.2"]
    assert spec.server_argv(_ctx()) == ["sh", "-c", "srv -d rxe0 -g 1 -p 18515"]


def test_double_braces_are_literal() -> None:
    text = substitute("echo ${{HOME}} | awk '{{print $1}}' {port}", {"port": 1}, "--server")
    assert text == "echo ${HOME} | awk '{print $1}' 1"


@pytest.mark.parametrize("value", [
    "x; touch /tmp/pwned", "$(touch /tmp/pwned)", "`touch /tmp/pwned`", "a' ; touch /tmp/pwned; '",
    "a\" ; touch /tmp/pwned; \"", "x\ntouch /tmp/pwned", "-rf /", "* ?", "&& true", "${IFS}",
])
def test_substituted_values_cannot_inject(value: str, tmp_path: Path) -> None:
    """Whatever a value holds, it reaches the command as one word, unchanged: run the
    result in a real shell and compare what it received."""
    command = substitute("printf '%s\\n' {device}", {"device": value}, "--client")
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout
    assert out == value + "\n"
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("template", "message"), [
    ("run {nope}", "--server-cmd: unknown placeholder {nope}"),
    ("run {}", "--server-cmd: unknown placeholder {}"),
    ("run {0}", "--server-cmd: unknown placeholder {0}"),
    ("run {device.__class__}", "--server-cmd: unknown placeholder {device.__class__}"),
    ("run {device!r}", "--server-cmd: placeholder {device} takes no format or conversion"),
    ("run {port:>10}", "--server-cmd: placeholder {port} takes no format or conversion"),
    ("run { x", "--server-cmd: expected '}' before end of string in 'run { x'"),
    ("run } x", "--server-cmd: Single '}' encountered in format string in 'run } x'"),
])
def test_bad_templates_exit_2_before_the_lab_is_opened(template: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        custom_spec(template, "true")
    assert info.value.message == message
    assert info.value.exit_code == 2


def test_gid_index_missing_on_siw_is_a_usage_error() -> None:
    spec = custom_spec("true", "x -g {gid_index}")
    server = Endpoint("node1", "siw0", "siw", None, "10.77.1.1")
    ctx = RunContext(server, server, {})
    with pytest.raises(UsageError, match=re.escape("--client-cmd: {gid_index} has no value")):
        spec.client_argv(ctx)


def test_readiness_options() -> None:
    ctx = _ctx()
    probe = custom_spec("s", "c", ready="test -e /tmp/{port}").ready_probe
    assert probe is not None and probe(ctx) == "sh -c " + shlex.quote("test -e /tmp/18515")
    port_probe = custom_spec("s", "c", ready_port=7000).ready_probe
    assert port_probe is not None and ":7000" in port_probe(ctx)
    assert custom_spec("s", "c").ready_probe is None
    with pytest.raises(UsageError, match="--ready and --ready-port exclude each other"):
        custom_spec("s", "c", ready="true", ready_port=1)


def test_every_placeholder_is_documented() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "examples.md").read_text()
    assert PLACEHOLDERS
    assert [name for name in PLACEHOLDERS if f"{{{name}}}" not in docs] == []


# --------------------------------------------------------------------------- the CLI


def test_up_mount_on_a_lab_that_is_up_is_refused(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "labs"))
    lab = _lab(tmp_path, "name: wbup\nnodes: {a: {rdma: none}}\n")
    labdir = LabDir("wbup")
    labdir.create(lab)
    labdir.save_state(LabState(provider="qemu", phase=Phase.UP))
    (tmp_path / "more").mkdir()
    options = lifecycle.UpOptions(mounts=(f"{tmp_path / 'more'}:/more",))
    # a folder is given when a lab is made: the lab that is up differs, by that mount
    with pytest.raises(UsageError, match="lab wbup is up from a different topology") as info:
        lifecycle.up(tmp_path / "t.yaml", options)
    assert f"node a: mounts [] → ['{tmp_path / 'more'}:/more']" in info.value.message
    assert "--recreate" in (info.value.hint or "")


@pytest.mark.parametrize(("args", "says"), [
    (["exec", "--all"], "--all needs a command"),
    (["exec"], "missing argument 'NODE'"),
    (["cp", "a", "b"], "one of SRC and DST must be NODE:PATH"),
    (["cp", "node1:/a", "node2:/b"], "copying from node to node is not supported"),
    (["run", "custom", "--server-cmd", "x {nope}", "--client-cmd", "y"],
     "--server-cmd: unknown placeholder {nope}"),
    (["run", "custom", "--server-cmd", "x", "--client-cmd", "y", "--ready", "a",
      "--ready-port", "1"],
     "--ready and --ready-port exclude each other"),
    (["run", "custom", "--server-cmd", "x", "--client-cmd", "y", "--ready-port", "70000"],
     "--ready-port"),
    (["up", "two-node", "--mount", "/nonexistent-wb:/x"],
     "--mount '/nonexistent-wb:/x': the host folder '/nonexistent-wb' does not exist"),
])
def test_bad_workbench_arguments_exit_2_before_any_lab(
        args: list[str], says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "labs"))
    code, _out, err = run_main(monkeypatch, capsys, *args)
    assert code == 2, err
    assert says in " ".join(err.split())
    assert "Traceback" not in err
    assert not (tmp_path / "labs").exists() or not any((tmp_path / "labs").iterdir())
