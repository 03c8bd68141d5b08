"""Every `--json` output has one shape, a JSON Schema made from the types the command
prints (labctl/cli/schemas.py) and published in docs/json/: the files are what the models
say, and each command's real output, produced in-process, validates against its file.

Lab directories here are made the way `up` makes them: lab.json from the real resolved
topology, state.json as the qemu provider wrote it for a live two-node lab and a node's
console log and node-side status report captured from that lab (tests/unit/outputs/status).
The errors docs/json.md and README promise for status and node names are checked here too.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import typer

from labctl.cli import schemas
from labctl.cli.app import app
from labctl.cli.run import print_results
from labctl.lab.handle import LabHandle
from labctl.runners.bench import summarize
from labctl.runners.execute import RunResult
from labctl.runners.parsers import parse_pingpong
from labctl.store.labdir import LabDir
from labctl.store.state import LabState, NodeStatus
from labctl.topology.load import load_lab
from labctl.verbs import records
from labctl.verbs.devices import as_json as devices_json
from tests.unit.clirun import run_main
from tests.unit.jsonshape import parsed

ROOT = Path(__file__).resolve().parents[2]
CAPTURED = Path(__file__).parent / "outputs" / "status"
OUTPUTS = Path(__file__).parent / "outputs"


def _main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
          *args: str) -> tuple[int, str, str]:
    code, out, err = run_main(monkeypatch, capsys, *args)
    return code, out, " ".join(err.split())


def _make_lab(state: Path, name: str, topology: str, with_state: bool = True) -> LabDir:
    """A lab directory as `up` leaves it: the resolved topology and the provider's state."""
    lab = dataclasses.replace(load_lab(ROOT / "topologies" / topology), name=name)
    labdir = LabDir(name, state)
    labdir.create(lab)
    if with_state:
        labdir.save_state(LabState.from_json((CAPTURED / "state.json").read_text()))
    return labdir


# --- status ------------------------------------------------------------------------------
def test_status_with_no_lab(state_dir: Path, monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _main(monkeypatch, capsys, "status", "--json")
    assert code == 0
    assert parsed("status", out).labs == []


def test_status_with_one_lab_whose_nodes_died(
        state_dir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _make_lab(state_dir, "ut-one", "two-node.yaml")  # the recorded qemu pids are long gone
    for args in (("status", "--json"), ("status", "--lab", "ut-one", "--json")):
        code, out, _ = _main(monkeypatch, capsys, *args)
        assert code == 1  # nodes not running
        (lab,) = parsed("status", out).labs
        assert (lab.lab, lab.provider, lab.phase) == ("ut-one", "qemu", "up")
        assert [(n.name, n.state, n.devices) for n in lab.nodes] == [
            ("node1", "stopped", []), ("node2", "stopped", [])]
        assert lab.nodes[0].management == f"127.0.0.1:{_state()['nodes']['node1']['ssh_port']}"
        assert lab.nodes[0].details["accel"] == "tcg"


def _state() -> dict[str, Any]:
    state: dict[str, Any] = json.loads((CAPTURED / "state.json").read_text())
    return state


@pytest.fixture
def running_node1(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LabDir]:
    """node1 of lab ut-run runs: a process carrying its qemu marker, its captured console
    (ready line included), and the node's captured own report."""
    labdir = _make_lab(state_dir, "ut-run", "two-node.yaml")
    # A qemu is known by its -pidfile argument (labctl/vm/machine.py).
    labdir.node_dir("node1").mkdir(parents=True)
    pidfile = labdir.node_dir("node1") / "qemu.pid"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                             "-pidfile", str(pidfile)])
    pidfile.write_text(f"{proc.pid}\n")
    state = labdir.load_state()
    state.nodes["node1"].pid = proc.pid
    labdir.save_state(state)
    (labdir.node_dir("node1") / "console.log").write_text(
        (CAPTURED / "node1-console.log").read_text())
    report = json.loads((CAPTURED / "node1-status.json").read_text())

    def node_status(self: LabHandle, node: str, timeout: float = 60) -> dict[str, Any]:
        assert node == "node1"
        return dict(report)

    monkeypatch.setattr(LabHandle, "node_status", node_status)
    try:
        yield labdir
    finally:
        proc.kill()
        proc.wait()


def test_status_with_a_running_node(running_node1: LabDir, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _main(monkeypatch, capsys, "status", "--lab", "ut-run", "--json")
    assert code == 1  # node2 is not running
    (lab,) = parsed("status", out).labs
    node1, node2 = lab.nodes
    assert node1.state == "running" and node1.reason == ""
    assert [(d.name, d.port_state, d.gid_index) for d in node1.devices] == [("rxe0", "ACTIVE", 1)]
    assert node1.live_interfaces[0].ipv4 == ["10.77.1.1/24"]
    assert node2.state == "stopped" and node2.devices == [] and node2.live_interfaces == []


def test_status_with_several_labs(running_node1: LabDir, state_dir: Path,
                                  monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    _make_lab(state_dir, "ut-four", "four-node.yaml", with_state=False)  # up died early
    code, out, err = _main(monkeypatch, capsys, "status", "--json")
    assert code == 1
    labs = parsed("status", out).labs
    assert [lab.lab for lab in labs] == ["ut-four", "ut-run"]
    # no state.json: the lab's `up` never got past its start (typed state: phase creating)
    assert {n.state for n in labs[0].nodes} == {"absent"} and labs[0].phase == "creating"
    assert "lab ut-four: `up` did not finish" in err
    code, text, _ = _main(monkeypatch, capsys, "status")  # the tables: one per lab
    assert code == 1
    assert "lab ut-four (qemu, creating)" in text and "lab ut-run (qemu, up)" in text


def test_status_of_an_unknown_lab_is_bad_input(
        state_dir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _make_lab(state_dir, "ut-one", "two-node.yaml")
    for as_json in ([], ["--json"]):
        code, out, err = _main(monkeypatch, capsys, "status", "--lab", "ut-nope", *as_json)
        assert (code, out) == (2, "")
        assert err == "error: no lab named 'ut-nope' is up hint: labs up: ut-one"


@pytest.mark.parametrize("args", [
    ["exec", "--lab", "ut-one", "node9", "--", "true"],
    ["devinfo", "--lab", "ut-one", "node9"],
    ["devices", "--lab", "ut-one", "node1", "node9"],
    ["link", "set", "--lab", "ut-one", "node9:eth1", "down"],
])
def test_an_unknown_node_is_bad_input_worded_one_way(
        args: list[str], state_dir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _make_lab(state_dir, "ut-one", "two-node.yaml")
    code, _, err = _main(monkeypatch, capsys, *args)
    assert code == 2
    assert err == "error: lab ut-one has no node 'node9' hint: nodes: node1, node2"


# --- image list --------------------------------------------------------------------------
def test_image_list_empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path))
    code, out, _ = _main(monkeypatch, capsys, "image", "list", "--json")
    assert code == 0
    assert parsed("image-list", out).images == []


def test_image_list_tells_package_lists_apart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """An image of a `packages:` list shows what it adds; an older one (nothing recorded)
    says so unless it is its recipe's own image."""
    from labctl.data.recipes import RECIPES
    from labctl.images.builder import image_dir

    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path))
    base = image_dir(RECIPES["trixie"]).name
    manifests = {base: {}, "trixie-0000000000000001": {"added_packages": ["gdb", "iperf3"]},
                 "trixie-0000000000000002": {}}
    for key, extra in manifests.items():
        (tmp_path / "images" / key).mkdir(parents=True)
        for name in ("vmlinux", "initrd.cpio", "root.ext4"):
            (tmp_path / "images" / key / name).write_bytes(b"")
        (tmp_path / "images" / key / "manifest.json").write_text(json.dumps({
            "name": "trixie", "key": key, "suite": "trixie", "kernel_suite": "trixie",
            "kernel": "6.12", "rdma_core": "56.1-1", "siw": True, "packages": {},
            "rootfs_bytes": 1 << 20, "build_seconds": 1.0, **extra}))
    code, out, _ = _main(monkeypatch, capsys, "image", "list", "--json")
    assert code == 0
    added = {i.key: i.added_packages
             for i in parsed("image-list", out).images}
    assert added == {base: [], "trixie-0000000000000001": ["gdb", "iperf3"],
                     "trixie-0000000000000002": None}
    monkeypatch.setenv("COLUMNS", "300")
    code, out, _ = _main(monkeypatch, capsys, "image", "list")
    assert code == 0
    assert "trixie + gdb iperf3" in out
    assert "trixie + packages not recorded" in out


def test_image_list_shows_saved_machines_and_which_this_labctl_uses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from labctl.vm import saved
    from tests.unit.test_restore import SHAPE, _cached_image

    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path))
    key = saved.saved_key(_cached_image(tmp_path), SHAPE)
    shape = {"accel": "tcg", "memory_mib": 512, "cpus": 1, "nics": 1, "rdma": "rxe"}
    for name, meta in ((f"trixie-aaaa-{key}", {"shape": shape, "state_bytes": 600 << 10,
                                                "ram_bytes": 512 << 20, "made": 1.5e9}),
                       ("trixie-aaaa-2222", {"shape": [1], "state_bytes": True})):
        (tmp_path / "saved" / name).mkdir(parents=True)
        (tmp_path / "saved" / name / "meta.json").write_text(json.dumps(meta))
    code, out, _ = _main(monkeypatch, capsys, "image", "list", "--json")
    assert code == 0
    listed = sorted(parsed("image-list", out).saved, key=lambda s: not s.usable)
    assert [(s.image, s.usable, s.state_bytes, s.ram_bytes) for s in listed] == [
        ("trixie-aaaa", True, 600 << 10, 512 << 20), ("trixie-aaaa", False, None, None)]
    assert listed[0].shape is not None and listed[0].shape.nics == 1
    assert listed[1].shape is None
    monkeypatch.setenv("COLUMNS", "300")
    code, out, _ = _main(monkeypatch, capsys, "image", "list")
    assert code == 0
    assert "rxe, 512 MiB, 1 CPU, 1 NIC, tcg" in out and "600 KiB" in out and "512 MiB" in out
    assert "no (removed at the next save)" in out


def test_image_list_real_cache(monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    from labctl.paths import cache_root

    if not any((cache_root() / "images").glob("*/manifest.json")):
        pytest.skip("no node image built on this host yet")
    code, out, _ = _main(monkeypatch, capsys, "image", "list", "--json")
    assert code == 0
    images = parsed("image-list", out).images
    assert images and all(Path(i.path).name == i.key for i in images)


# --- doctor ------------------------------------------------------------------------------
def test_doctor_on_this_host(monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _main(monkeypatch, capsys, "doctor", "--json")
    report = parsed("doctor", out)
    assert code == (0 if report.usable else 1)
    assert [(p.provider, p.engine) for p in report.providers] == [
        ("qemu", None), ("docker", "vm"), ("docker", "local")]
    assert {c.name for c in report.checks} >= {"qemu tools", "KVM", "Docker host VM"}


def test_doctor_without_any_provider_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    # No qemu, docker or RDMA tools on PATH: nothing can run labs here.
    monkeypatch.setenv("PATH", str(tmp_path))
    code, out, _ = _main(monkeypatch, capsys, "doctor", "--json")
    report = parsed("doctor", out)
    assert (code, report.usable) == (1, False)
    assert {p.verdict for p in report.providers} == {"no"}
    code, text, _ = _main(monkeypatch, capsys, "doctor")
    assert code == 1
    assert text.rstrip().splitlines()[-1].startswith("no provider can run labs on this host")


def test_doctor_with_a_vm_it_cannot_ask_says_so(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The Docker host VM runs but cannot be asked (here: no ssh on PATH): a failed check
    with a hint, never a traceback."""
    from labctl.dockerhost.engine import Engine
    from labctl.dockerhost.vm import DockerHostVM

    def no_ssh(self: Engine, *args: str, timeout: float = 120) -> dict[str, Any]:
        raise FileNotFoundError(2, "No such file or directory", "ssh")

    monkeypatch.setattr(DockerHostVM, "running", lambda self: True)
    monkeypatch.setattr(Engine, "reachable", lambda self: True)
    monkeypatch.setattr(Engine, "helper", no_ssh)
    code, out, _ = _main(monkeypatch, capsys, "doctor", "--json")
    assert code in (0, 1)  # 1 when no provider works on this host
    report = parsed("doctor", out)
    (vm,) = [c for c in report.checks if c.name == "Docker host VM"]
    assert vm.result == "no" and "cannot be asked" in vm.detail and "ssh" in vm.detail, vm


# --- run, bench --------------------------------------------------------------------------
def _captured_run() -> RunResult:
    """The record of a real `labctl run pingpong --json` (lab hdocs, 20 iterations)."""
    return RunResult(**json.loads((CAPTURED / "run-pingpong-rc.json").read_text()))


def test_run_one_example_prints_its_record_under_records(
        capsys: pytest.CaptureFixture[str]) -> None:
    """One pair as many: the top level is an object, the records under "records"."""
    print_results([_captured_run()], as_json=True)
    (record,) = parsed("run", capsys.readouterr().out).records
    assert (record.status, record.key_figure) == ("passed", "usec_per_iter")
    other = dataclasses.replace(_captured_run(), server="node2", client="node1")
    print_results([_captured_run(), other], as_json=True)
    out = parsed("run", capsys.readouterr().out)
    assert list(out) == ["records"]
    assert [(r.server, r.client) for r in out.records] == [("node1", "node2"), ("node2", "node1")]


def test_run_across_a_router_has_its_path_and_ttls(capsys: pytest.CaptureFixture[str]) -> None:
    """The record of a real `labctl run rping --lab routed --capture --json`."""
    run = RunResult(**json.loads((OUTPUTS / "run-rping-routed.json").read_text()))
    print_results([run], as_json=True)
    (record,) = parsed("run", capsys.readouterr().out).records
    assert record.path is not None and record.path.routers == ["router"]
    assert record.capture is not None and record.capture.hops == 1
    assert {f.ttl for f in record.capture.ttl} == {63, 64}


def test_run_all_prints_a_list_of_records(capsys: pytest.CaptureFixture[str]) -> None:
    skipped = dataclasses.replace(_captured_run(), variant="ud-1qp", example="mckey",
                                  status="skipped", reason="rxe delivers only the first")
    print_results([_captured_run(), skipped], as_json=True, summary=True)
    records = parsed("run-all", capsys.readouterr().out).records
    assert [r.status for r in records] == ["passed", "skipped"]
    print_results([_captured_run()], as_json=True, summary=True)  # a list even of one
    assert len(parsed("run-all", capsys.readouterr().out).records) == 1


def test_bench_report() -> None:
    def result(impl: str) -> RunResult:
        output = (OUTPUTS / f"pingpong-{impl}.client.txt").read_text()
        return RunResult("pingpong", impl, "node1", "node2", "passed",
                         figures=parse_pingpong(output), key_figure="usec_per_iter")

    failed = dataclasses.replace(_captured_run(), status="failed", reason="client exited with 1")
    report = summarize("node1", "node2", 200, 1, {
        4096: {"c": [result("rc-c")], "python": [result("rc-py"), failed],
               "tcp": [result("tcp")]},
        64: {"c": [result("rc-c")], "tcp": [result("tcp")]},
    }, link_mtu=1500, rdma_mtu="1024", accel="tcg")
    out = parsed("bench", json.dumps(report.to_dict()))
    assert [p.size for p in out.points] == [4096, 64] and out.sizes == [4096, 64]
    assert set(out.points[0].impls) == {"c", "python", "tcp"} and len(out.failed) == 1
    assert out.emulation_bound and "TCG" in out.note and out.best is not None


# --- validate, docker-host status --------------------------------------------------------
@pytest.mark.parametrize("topology", sorted(p.name for p in (ROOT / "topologies").glob("*.yaml")))
def test_validate(topology: str, monkeypatch: pytest.MonkeyPatch,
                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _main(monkeypatch, capsys, "validate", "--json",
                         str(ROOT / "topologies" / topology))
    assert code == 0
    assert parsed("validate", out).nodes


def test_validate_of_a_file_with_problems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 2, the problems on stdout as data, and the error as text on stderr."""
    path = tmp_path / "bad.yaml"
    path.write_text("name: Bad_Name\nnodes:\n  n1: {rdma: foo}\n  n2: {memory: -5}\n")
    code, out, err = _main(monkeypatch, capsys, "validate", "--json", str(path))
    assert code == 2
    problems = parsed("validate", out)
    assert [(p.file, p.line, p.field) for p in problems.problems] == [
        (str(path), 1, "name"), (str(path), 3, "nodes.n1.rdma"), (str(path), 4, "nodes.n2.memory")]
    assert problems.problems[1].message == "must be one of rxe, siw, none (got 'foo')"
    assert problems.problems[2].hint == "memory takes a whole number from 128 to 65536 MiB"
    assert problems.more == 0
    assert err.startswith(f"error: {path}: 3 problems")
    # beyond 20 problems: the first 20, and how many more; a file that cannot be read has
    # no line
    keys = "".join(f"k{i}: 1\n" for i in range(25))
    path.write_text(f"name: t\nnodes: {{a: {{rdma: none}}}}\n{keys}")
    code, out, _ = _main(monkeypatch, capsys, "validate", "--json", str(path))
    problems = parsed("validate", out)
    assert (code, len(problems.problems), problems.more) == (2, 20, 5)
    code, out, _ = _main(monkeypatch, capsys, "validate", "--json", str(tmp_path / "gone.yaml"))
    problems = parsed("validate", out)
    assert (code, [p.line for p in problems.problems], problems.more) == (2, [None], 0)


def test_docker_host_status_on_this_host(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _main(monkeypatch, capsys, "docker-host", "status", "--json")
    status = parsed("docker-host-status", out)
    assert code == (0 if status.running else 1)


# --- devinfo, devices: the node-side records ---------------------------------------------
def _keys_follow_records(value: dict[str, Any], record: type[records.Record]) -> None:
    assert list(value) == sorted(record._fields), record.__name__


@pytest.mark.parametrize("capture", ["rxe-node1", "no-device"])
def test_devinfo_json_is_the_snapshot_records(capture: str) -> None:
    # devinfo --json prints Snapshot.to_json() of what the node captured.
    text = (Path(__file__).parent / "verbs_records" / f"{capture}.json").read_text()
    out = json.loads(records.Snapshot.from_json(text).to_json())
    _keys_follow_records(out, records.Snapshot)
    for device in out["devices"]:
        _keys_follow_records(device, records.DeviceRecord)
        _keys_follow_records(device["attr"], records.DeviceAttr)
        for port in device["ports"]:
            _keys_follow_records(port, records.PortRecord)
            _keys_follow_records(port["attr"], records.PortAttr)
            for gid in port["gids"]:
                _keys_follow_records(gid, records.Gid)


def test_devices_json(capsys: pytest.CaptureFixture[str]) -> None:
    """`labctl devices --json`: each node's list, or why it has none (keyed by node)."""
    from labctl.cli.inspect import JSON_REPLY_KINDS, _report

    text = (Path(__file__).parent / "verbs_records" / "rxe-node1.json").read_text()
    listed = devices_json(records.Snapshot.from_json(text))
    failed = devices_json(records.Snapshot(list_errno=19))
    results = {"node1": subprocess.CompletedProcess([], 0, listed, ""),
               "node2": subprocess.CompletedProcess([], 1, failed, ""),
               "node9": subprocess.CompletedProcess([], 1, "", "timed out\n")}
    assert _report(results, as_json=True, kinds=JSON_REPLY_KINDS["devices"]) == 1
    out = parsed("devices", capsys.readouterr().out)
    assert out == {"node1": [{"device": "rxe0", "node_guid": out["node1"][0]["node_guid"]}],
                   "node2": {"error": "No such device", "errno": 19},
                   "node9": {"error": "timed out"}}


@pytest.mark.parametrize("nodes", [["node1"], ["node1", "node2"]])
def test_devinfo_json_has_one_shape_for_any_number_of_nodes(
        nodes: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """`labctl devinfo --json` (and devices): an object keyed by node name, also for one."""
    from labctl.cli.inspect import _report

    text = (Path(__file__).parent / "verbs_records" / "rxe-node1.json").read_text()
    record = records.Snapshot.from_json(text).to_json()
    results = {n: subprocess.CompletedProcess([], 0, record, "") for n in nodes}
    results["node9"] = subprocess.CompletedProcess([], 1, "", "no such device\n")
    assert _report(results, as_json=True) == 1
    out = parsed("devinfo", capsys.readouterr().out)
    assert list(out) == [*nodes, "node9"]
    assert all(out[n] == json.loads(record) for n in nodes)
    assert out["node9"] == {"error": "no such device"}


# --- the list itself ---------------------------------------------------------------------
def _json_commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[str]:
    for name, sub in getattr(command, "commands", {}).items():
        yield from _json_commands(sub, (*path, name))
    if any("--json" in getattr(p, "opts", ()) for p in getattr(command, "params", ())):
        yield " ".join(path)


def test_every_json_output_has_a_schema_and_a_doc() -> None:
    commands = sorted(_json_commands(typer.main.get_command(app)))
    assert commands == sorted([c for o in schemas.OUTPUTS for c in o.commands]
                              + list(schemas.UNPUBLISHED))
    doc = (ROOT / "docs" / "json.md").read_text()
    missing = [c for c in commands if f"`labctl {c}" not in doc]
    assert missing == [], f"docs/json.md does not describe {missing}"
    unlinked = [o.file for o in schemas.OUTPUTS if f"](json/{o.file})" not in doc]
    assert unlinked == [], f"docs/json.md does not link {unlinked}"


def test_published_schemas_are_what_the_models_say() -> None:
    """docs/json/*.schema.json are generated; after changing a model (or a dataclass that
    is an output) regenerate them with `python -m labctl.cli.schemas`."""
    assert schemas.stale() == [], "regenerate: python -m labctl.cli.schemas"


def test_schema_check_says_what_is_stale_and_how_to_fix_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert schemas.main(["--dir", str(tmp_path)]) == 0  # writes every file
    assert schemas.main(["--check", "--dir", str(tmp_path)]) == 0
    (tmp_path / "status.schema.json").write_text("{}\n")
    (tmp_path / "gone.schema.json").write_text("{}\n")
    (tmp_path / "down.schema.json").unlink()
    assert schemas.main(["--check", "--dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"{tmp_path}/status.schema.json: differs from the models",
                   f"{tmp_path}/down.schema.json: missing",
                   f"{tmp_path}/gone.schema.json: no output has it",
                   "hint: python -m labctl.cli.schemas"]


def test_schemas_are_closed_and_dataclass_fields_required() -> None:
    """A key the model does not name is a shape change; asdict writes every field, except
    the ones the resolved lab leaves out when empty or at their default (kernel: image)."""
    validate = schemas.schema(next(o for o in schemas.OUTPUTS if o.name == "validate"))
    node = validate["$defs"]["Node"]
    assert node["additionalProperties"] is False
    assert {"packages", "mounts", "kernel"} == set(node["properties"]) - set(node["required"])
    status = schemas.schema(next(o for o in schemas.OUTPUTS if o.name == "status"))
    lab = status["$defs"]["LabStatusRecord"]
    assert lab["additionalProperties"] is False
    assert {"error", "busy"} == set(lab["properties"]) - set(lab["required"])
    assert status["$defs"]["NodeStatus"]["enum"] == [str(s) for s in NodeStatus]


def test_doctor_says_whether_nodes_share_pages_through_ksm(tmp_path: Path) -> None:
    """KSM on: how much is shared; off: a warning with the host-wide switch; no KSM in the
    kernel: skipped. doctor reads these files only (labctl never turns KSM on)."""
    from labctl.cli.doctor import check_ksm

    assert check_ksm(tmp_path / "missing").result == "skipped"
    (tmp_path / "run").write_text("1\n")
    (tmp_path / "pages_sharing").write_text("87296\n")
    on = check_ksm(tmp_path)
    assert (on.result, on.detail) == ("ok", "on: 341 MiB of pages shared now")
    (tmp_path / "run").write_text("0\n")
    off = check_ksm(tmp_path)
    assert off.result == "warn" and f"echo 1 > {tmp_path}/run" in off.todo, off
    (tmp_path / "pages_sharing").write_text("garbage\n")
    odd = check_ksm(tmp_path)
    assert (odd.result, odd.detail) == ("skipped", f"{tmp_path}/pages_sharing holds no number")


# --- topologies, up, down, link set, exec --all, capture --decode ------------------------
def test_topologies(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _main(monkeypatch, capsys, "topologies", "--json")
    assert code == 0
    rows = parsed("topologies", out).topologies
    assert sorted(r.name for r in rows) == sorted(
        p.stem for p in (ROOT / "labctl" / "data" / "topologies").glob("*.yaml"))
    assert all(r.error == "" and r.nodes and r.provider for r in rows)
    two = next(r for r in rows if r.name == "two-node")
    assert (two.nodes, two.rdma, two.provider) == (2, ["rxe"], "qemu")


def test_up_prints_the_lab_and_its_status(state_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`up --json` around the lifecycle: the lab directory is as a real `up` left it (lab.json,
    the provider's state.json), so the status part is what status reads from it."""
    from labctl.lab import lifecycle

    labdir = _make_lab(state_dir, "ut-up", "two-node.yaml")
    made = lifecycle.up_result(labdir, 12.34)
    monkeypatch.setattr(lifecycle, "up", lambda path, options, progress, resolved: made)
    code, out, _ = _main(monkeypatch, capsys, "up", "two-node", "--json")
    assert code == 0
    record = parsed("up", out)
    assert (record.lab, record.seconds, record.repaired, record.restored) == (
        "ut-up", 12.3, [], [])
    assert record.status.lab == "ut-up" and [n.name for n in record.status.nodes] == [
        "node1", "node2"]


def test_up_reports_devices_as_the_nodes_ready_lines_said(
        running_node1: LabDir, state_dir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`up --json` asks no node: a running node's devices are what its ready line said at
    boot (state.json), four keys each, not the live report's eight."""
    from labctl.lab import lifecycle

    made = lifecycle.up_result(running_node1, 1.0)
    monkeypatch.setattr(lifecycle, "up", lambda path, options, progress, resolved: made)
    code, out, _ = _main(monkeypatch, capsys, "up", "two-node", "--json")
    assert code == 0
    node1, node2 = parsed("up", out).status.nodes
    assert node1.state == "running" and node1.devices == [
        {"name": "rxe0", "port_state": "ACTIVE", "active_mtu": "1024", "gid_index": 1}]
    assert node2.state == "stopped" and node2.devices == []


def test_down(state_dir: Path, monkeypatch: pytest.MonkeyPatch,
              capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _main(monkeypatch, capsys, "down", "--json")
    assert (code, parsed("down", out).labs) == (0, [])
    _make_lab(state_dir, "ut-down", "two-node.yaml")  # its recorded qemu pids are long gone
    code, out, _ = _main(monkeypatch, capsys, "down", "--lab", "ut-down", "--json")
    assert code == 0
    (lab,) = parsed("down", out).labs
    assert lab.lab == "ut-down" and any(r.startswith("lab directory ") for r in lab.removed)
    assert not (state_dir / "ut-down").exists()


def test_link_set(state_dir: Path, monkeypatch: pytest.MonkeyPatch,
                  capsys: pytest.CaptureFixture[str]) -> None:
    """The provider's carrier switch and the node's tc are stood in for (tc prints nothing
    when it succeeds); what is printed is what labctl decided."""
    from labctl.providers.qemu import QemuProvider

    _make_lab(state_dir, "ut-link", "two-node.yaml")
    carrier: list[tuple[str, str, bool]] = []
    commands: list[list[str]] = []
    monkeypatch.setattr(QemuProvider, "set_link_state",
                        lambda self, node, ifname, up: carrier.append((node, ifname, up)))

    def run(self: LabHandle, node: str, command: list[str],
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
        commands.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(LabHandle, "run", run)
    code, out, _ = _main(monkeypatch, capsys, "link", "set", "--lab", "ut-link", "node1:eth1",
                         "down", "--loss", "5%", "--delay", "10ms", "--json")
    assert code == 0
    done = parsed("link-set", out)
    assert (done.node, done.interface, done.state) == ("node1", "eth1", "down")
    assert done.netem == ["delay", "10ms", "loss", "5%"] == commands[0][7:]
    assert carrier == [("node1", "eth1", False)]
    code, out, _ = _main(monkeypatch, capsys, "link", "set", "--lab", "ut-link", "node2:eth1",
                         "--clear", "--json")
    done = parsed("link-set", out)
    assert (code, done.state, done.netem) == (0, None, [])


def test_exec_all(state_dir: Path, monkeypatch: pytest.MonkeyPatch,
                  capsys: pytest.CaptureFixture[str]) -> None:
    _make_lab(state_dir, "ut-exec", "two-node.yaml")

    def run(self: LabHandle, node: str, command: list[str],
            **kwargs: Any) -> subprocess.CompletedProcess[str]:  # node2's command fails
        return subprocess.CompletedProcess(command, 3 if node == "node2" else 0,
                                           f"out {node}\n", "bad\n" if node == "node2" else "")

    monkeypatch.setattr(LabHandle, "run", run)
    code, out, err = _main(monkeypatch, capsys, "exec", "--all", "--lab", "ut-exec", "--json",
                           "--", "hostname")
    assert code == 1 and "failed on 1 of 2 nodes: node2 (exit 3)" in err
    result = parsed("exec", out)
    assert (result.command, result.failed) == (["hostname"], ["node2"])
    assert [(n.node, n.exit_code, n.stdout) for n in result.nodes] == [
        ("node1", 0, "out node1\n"), ("node2", 3, "out node2\n")]
    code, out, err = _main(monkeypatch, capsys, "exec", "node1", "--lab", "ut-exec", "--json",
                           "--", "hostname")
    assert (code, out) == (2, "") and "--json goes with --all" in err


@pytest.mark.parametrize("pcap", sorted(p.name for p in (Path(__file__).parent / "captures")
                                        .glob("*.pcap")))
def test_capture_decode(pcap: str, monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str]) -> None:
    """One line per packet, each a CaptureFrame, the same packets as the text form."""
    from labctl.wire.summary import decode_file

    path = Path(__file__).parent / "captures" / pcap
    code, out, _ = _main(monkeypatch, capsys, "capture", "--decode", str(path), "--json")
    assert code == 0
    frames = [parsed("capture", line) for line in out.splitlines()]
    decoded = decode_file(path)
    assert [(f.index, f.proto, f.ops) for f in frames] == [
        (d.index, d.proto, d.ops) for d in decoded]


@pytest.mark.parametrize("args", [
    ("capture", "--decode", "tests/unit/captures/rxe-rping.pcap", "--ladder", "x.png",
     "--json"),
    ("capture", "node1:eth1", "--json"),
])
def test_capture_json_goes_with_decode_only(args: tuple[str, ...],
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(monkeypatch, capsys, *args)
    assert (code, out) == (2, "") and "--json" in err


# --- fault list, counters, a run's counter change ----------------------------------------
def test_fault_list_and_counters_records() -> None:
    """Real `labctl fault list --json` and `labctl counters node1 --json` (lab h6-flt)."""
    faults = parsed("fault-list", (OUTPUTS / "fault-list.json").read_text())
    (fault,) = faults.faults
    assert (fault.spec.action, fault.spec.count, fault.hit) == ("drop", 1, 1)
    record = parsed("counters", (OUTPUTS / "counters-rxe.json").read_text())
    assert "rcvd_seq_err" in record.counters["rxe0/1"]
    assert "RetransSegs" in record.counters["tcp"]


def test_run_record_has_each_nodes_counter_change(capsys: pytest.CaptureFixture[str]) -> None:
    """A real `labctl run pingpong --json` with the first SEND of node2 dropped."""
    run = RunResult(**json.loads(
        (OUTPUTS / "run-pingpong-fault-dropped-send.json").read_text()))
    print_results([run], as_json=True)
    (record,) = parsed("run", capsys.readouterr().out).records
    assert record.counters is not None
    node1 = record.counters["node1"]
    assert node1 is not None and node1["rxe0/1"]["out_of_seq_request"] >= 1


# --- stop, start, restart, cp, fault clear, image build, docker-host up|down --------------
@pytest.mark.parametrize(("verb", "action"), [
    ("stop", "stopped"), ("start", "started"), ("restart", "restarted")])
def test_node_actions(verb: str, action: str, state_dir: Path,
                      monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> None:
    from labctl.lab import lifecycle

    _make_lab(state_dir, "ut-node", "two-node.yaml")
    done: list[tuple[str, str]] = []
    monkeypatch.setattr(lifecycle, f"{verb}_node",
                        lambda labdir, node, *rest: done.append((labdir.name, node)))
    code, out, err = _main(monkeypatch, capsys, verb, "node2", "--lab", "ut-node", "--json")
    assert code == 0, err
    record = parsed("node-action", out)
    assert (record.lab, record.node, record.action) == ("ut-node", "node2", action)
    assert record.seconds >= 0 and done == [("ut-node", "node2")]


def test_cp_both_ways(state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> None:
    import labctl.cli.cp as cp_cli

    _make_lab(state_dir, "ut-cp", "two-node.yaml")
    monkeypatch.setattr(cp_cli, "copy_to_node",
                        lambda handle, request, timeout: f"{request.node}:{request.node_path}")
    monkeypatch.setattr(cp_cli, "copy_from_node", lambda handle, request, timeout: (
        str(tmp_path / "got"), "skipped 1 FIFO (fifo)"))
    code, out, err = _main(monkeypatch, capsys, "cp", str(tmp_path), "node1:/tmp/x",
                           "--lab", "ut-cp", "--json")
    assert code == 0, err
    sent = parsed("cp", out)
    assert (sent.node, sent.direction, sent.destination, sent.skipped) == (
        "node1", "to-node", "node1:/tmp/x", None)
    code, out, err = _main(monkeypatch, capsys, "cp", "node2:/etc", str(tmp_path / "got"),
                           "--lab", "ut-cp", "--json")
    assert code == 0, err
    got = parsed("cp", out)
    assert (got.node, got.direction, got.source) == ("node2", "from-node", "node2:/etc")
    assert got.skipped == "skipped 1 FIFO (fifo)" and "FIFO" not in err  # in the record


def test_fault_clear(state_dir: Path, monkeypatch: pytest.MonkeyPatch,
                     capsys: pytest.CaptureFixture[str]) -> None:
    from labctl.rdmafault import apply

    _make_lab(state_dir, "ut-fc", "two-node.yaml")
    removed = [SimpleNamespace(id=3), SimpleNamespace(id=5)]
    monkeypatch.setattr(apply, "clear_faults", lambda handle, endpoint, fault_id: removed)
    code, out, err = _main(monkeypatch, capsys, "fault", "clear", "--lab", "ut-fc", "--json")
    assert code == 0, err
    assert parsed("fault-clear", out) == {"lab": "ut-fc", "removed": [3, 5]}
    monkeypatch.setattr(apply, "clear_faults", lambda handle, endpoint, fault_id: [])
    code, out, _ = _main(monkeypatch, capsys, "fault", "clear", "--lab", "ut-fc", "--json")
    assert (code, parsed("fault-clear", out).removed) == (0, [])


def test_image_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                     capsys: pytest.CaptureFixture[str]) -> None:
    import labctl.cli.image as image_cli

    manifest = {"key": "trixie-0123abcd", "kernel": "6.12.1", "rdma_core": "56.1"}
    image = SimpleNamespace(path=tmp_path / "trixie-0123abcd", manifest=manifest)
    monkeypatch.setattr(image_cli, "build_image", lambda *args, **kwargs: image)
    code, out, err = _main(monkeypatch, capsys, "image", "build", "trixie", "--json")
    assert code == 0, err
    record = parsed("image-build", out)
    assert (record.name, record.key, record.path) == (
        "trixie", "trixie-0123abcd", str(tmp_path / "trixie-0123abcd"))


def test_docker_host_up_and_down(monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    import labctl.cli.docker_host as docker_host_cli
    from labctl.dockerhost.vm import DockerHostVM

    monkeypatch.setattr(DockerHostVM, "up", lambda self, progress, **kw: {
        "image_seconds": 0.1, "boot_seconds": 20.5, "engine_seconds": 3.0})
    code, out, err = _main(monkeypatch, capsys, "docker-host", "up", "--json")
    assert code == 0, err
    up = parsed("docker-host-up", out)
    assert (up.name, up.already_running, up.host_address) == ("default", False, None)
    assert up.engine.startswith("unix://") and up.timings["boot_seconds"] == 20.5
    monkeypatch.setattr(DockerHostVM, "up", lambda self, progress, **kw: {
        "already_running": True})
    code, out, _ = _main(monkeypatch, capsys, "docker-host", "up", "--json")
    assert code == 0 and parsed("docker-host-up", out).already_running is True
    monkeypatch.setattr(docker_host_cli, "_labs_using_vm", lambda name="default": [])
    monkeypatch.setattr(DockerHostVM, "down", lambda self: ["qemu dockerhost (pid 7)"])
    code, out, err = _main(monkeypatch, capsys, "docker-host", "down", "--json")
    assert code == 0, err
    assert parsed("docker-host-down", out) == {"name": "default",
                                               "removed": ["qemu dockerhost (pid 7)"]}
