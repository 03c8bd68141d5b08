"""The typed lab state, corrupt lab files, qemu identity, QMP EOF, unsupported operations
and locks (no VM is started: stand-in processes carry qemu's identifying arguments)."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from labctl.errors import LabctlError
from labctl.lab import lifecycle
from labctl.providers.base import UnsupportedError
from labctl.providers.vagrant import VagrantProvider
from labctl.store.labdir import LabDir
from labctl.store.state import (
    CorruptStateError,
    EngineState,
    LabState,
    NodeState,
    NodeStatus,
    Phase,
    TapState,
    VmInfo,
)
from labctl.topology.load import load_lab
from labctl.vm.machine import QemuMachine, node_machine
from labctl.vm.qmp import qmp_command
from tests.unit.fakes import fake_qemu

REPO = Path(__file__).resolve().parents[2]


def _state() -> LabState:
    return LabState(
        provider="qemu", phase=Phase.UP, netns="labctl-x", accel="tcg", ready_seconds=3.5,
        nodes={"node1": NodeState(rdma_dev="rxe0", ssh_port=4000, argv=["qemu", "-m", "1"],
                                  taps=[TapState("t1-eth1", "br0", 1500)], pid=42,
                                  started=1.5, gid_index=1, active_mtu="1024",
                                  port_state="ACTIVE")},
        engine=EngineState("vm", "unix:///x.sock"), veths=["v1-eth1"],
        vm=VmInfo(memory_mib=2048, cpus=2, image="img", data_disk="/d", kernel="7.3"),
    )


def test_state_round_trips_through_json() -> None:
    state = _state()
    assert LabState.from_json(state.to_json()) == state
    assert LabState.from_json(LabState(provider="docker").to_json()) == LabState("docker")


def test_node_states_are_the_ones_status_emits() -> None:
    assert [str(s) for s in NodeStatus] == ["running", "booting", "failed", "stopped",
                                            "absent", "unrecorded", "unreadable"]


@pytest.mark.parametrize("text", ["", "{", "[]", '{"provider": "qemu", "phase": "flying"}',
                                  '{"provider": "qemu", "nodes": {"n": {"pid": "x"}}}',
                                  '{"provider": "qemu", "nodes": []}', "\xff\xfe"])
def test_a_corrupt_state_file_is_a_labctl_error(tmp_path: Path, text: str) -> None:
    labdir = LabDir("ut-corrupt", root=tmp_path)
    labdir.path.mkdir()
    labdir.state_file.write_text(text)
    with pytest.raises(CorruptStateError) as exc:
        labdir.load_state()
    assert "state.json is corrupt" in exc.value.message
    assert exc.value.hint and "labctl down --lab ut-corrupt" in exc.value.hint


def test_state_writes_are_atomic(tmp_path: Path) -> None:
    """A reader never sees half a file, and no temp file is left behind."""
    labdir = LabDir("ut-atomic", root=tmp_path)
    labdir.path.mkdir()
    big = _state()
    big.nodes["node1"].argv = ["x" * 1000] * 200
    stop = threading.Event()
    seen: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            if labdir.state_file.exists():
                seen.append(str(labdir.load_state().provider))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(50):
            labdir.save_state(big)
    finally:
        stop.set()
        thread.join()
    assert set(seen) <= {"qemu"}
    assert sorted(p.name for p in labdir.path.iterdir()) == ["state.json"]


# --- corrupt lab files: status says so, down still cleans up ---------------------------


def _labctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "labctl", *args], capture_output=True,
                          text=True, check=False, env={**os.environ, "COLUMNS": "200"})


def _lab(state_root: Path, name: str) -> LabDir:
    lab = dataclasses.replace(load_lab(REPO / "topologies/two-node.yaml"), name=name)
    labdir = LabDir(name)
    labdir.create(lab)
    return labdir


@pytest.mark.parametrize("broken", ["state.json", "lab.json"])
def test_status_reports_a_corrupt_file_and_down_cleans_up(
        state_root: Path, spawned: list[subprocess.Popen[bytes]], broken: str) -> None:
    labdir = _lab(state_root, "ut-broken")
    machine = node_machine("ut-broken", "node1", labdir.node_dir("node1"))
    pid = fake_qemu(machine, spawned)
    labdir.save_state(LabState(provider="qemu", phase=Phase.UP,
                               nodes={"node1": NodeState(pid=pid, ssh_port=1)}))
    (labdir.path / broken).write_text('{"name": "ut-broken", "nod')  # truncated
    status = _labctl("status", "--lab", "ut-broken")
    assert status.returncode == 1
    flat = " ".join(status.stderr.split())
    assert f"{broken} is corrupt" in flat and "labctl down --lab ut-broken" in flat
    assert "Traceback" not in status.stderr
    down = _labctl("down", "--lab", "ut-broken")
    assert down.returncode == 0, down.stderr
    assert f"qemu node1 (pid {pid})" in " ".join(down.stdout.split())
    assert spawned[0].poll() is not None  # exited before down returned
    assert not labdir.path.exists()


def test_down_of_a_lab_without_lab_json_or_state(state_root: Path,
                                                 spawned: list[subprocess.Popen[bytes]]) -> None:
    """Both files unreadable: the pidfiles still name the lab's qemu processes."""
    labdir = LabDir("ut-bare")
    pid = fake_qemu(node_machine("ut-bare", "node2", labdir.node_dir("node2")), spawned)
    labdir.state_file.write_bytes(b"\x00\xff garbage")
    removed = lifecycle.destroy("ut-bare")
    assert f"qemu node2 (pid {pid})" in removed
    assert spawned[0].poll() is not None
    assert not labdir.path.exists()


# --- identity: exact, never by substring ----------------------------------------------


def test_qemu_identity_is_exact(state_root: Path, spawned: list[subprocess.Popen[bytes]]) -> None:
    """node1 is not node10; lab rv's node x-node1 is not lab rv-x's node1 (same -name)."""
    rv = LabDir("rv")
    rvx = LabDir("rv-x")
    node1 = node_machine("rv", "node1", rv.node_dir("node1"))
    node10 = node_machine("rv", "node10", rv.node_dir("node10"))
    x_node1 = node_machine("rv", "x-node1", rv.node_dir("x-node1"))
    other = node_machine("rv-x", "node1", rvx.node_dir("node1"))
    assert x_node1.guest == other.guest  # the -name alone cannot tell them apart
    pid10 = fake_qemu(node10, spawned)
    pid_other = fake_qemu(other, spawned)
    assert not node1.owns(pid10) and node10.owns(pid10)
    assert not x_node1.owns(pid_other) and other.owns(pid_other)
    assert not x_node1.stop(pid_other)
    assert spawned[1].poll() is None
    assert other.stop(pid_other) and spawned[1].poll() is not None


def test_stop_escalates_to_kill_and_waits(tmp_path: Path,
                                          spawned: list[subprocess.Popen[bytes]],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import labctl.vm.machine as machine_module

    monkeypatch.setattr(machine_module, "STOP_TERM_SECONDS", 0.3)
    machine = QemuMachine(tmp_path / "n", "labctl-ut-n")
    machine.dir.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal("
                             "signal.SIGTERM, signal.SIG_IGN); time.sleep(120)",
                             "-pidfile", str(machine.pidfile)], start_new_session=True)
    spawned.append(proc)
    for _ in range(200):
        if machine.owns(proc.pid):
            break
        time.sleep(0.01)
    time.sleep(0.2)  # its SIGTERM handler is set
    assert machine.stop(proc.pid)
    assert proc.poll() is not None and not Path(f"/proc/{proc.pid}").exists()


# --- QMP, unsupported operations, locks -------------------------------------------------


def test_qmp_eof_is_a_labctl_error(tmp_path: Path) -> None:
    path = tmp_path / "qmp.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def hang_up() -> None:
        conn, _ = server.accept()
        conn.close()  # qemu exiting: EOF before the greeting

    thread = threading.Thread(target=hang_up)
    thread.start()
    try:
        with pytest.raises(LabctlError, match="closed its control socket"):
            qmp_command(path, "set_link", name="eth1", up=False)
    finally:
        thread.join()
        server.close()


def test_unsupported_operations_exit_2_with_a_hint(tmp_path: Path) -> None:
    lab = dataclasses.replace(load_lab(REPO / "topologies/two-node.yaml"), provider="vagrant")
    provider = VagrantProvider(lab, LabDir("ut-vagrant", root=tmp_path))
    with pytest.raises(UnsupportedError) as exc:
        provider.set_link_state("node1", "eth1", False)
    assert exc.value.exit_code == 2 and exc.value.hint


def test_down_keeps_the_lock_until_the_directory_is_gone(
        state_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    labdir = _lab(state_root, "ut-lock")
    labdir.save_state(LabState(provider="qemu", phase=Phase.UP))
    seen: list[bool] = []
    real_remove = LabDir.remove

    def remove(self: LabDir) -> bool:
        # while down removes the directory, another labctl finds the lab busy
        with pytest.raises(LabctlError, match="is busy"), LabDir("ut-lock").locked("up"):
            pass
        seen.append(True)
        return real_remove(self)

    monkeypatch.setattr(LabDir, "remove", remove)
    lifecycle.destroy("ut-lock")
    assert seen == [True] and not labdir.path.exists()


def test_the_docker_host_vm_lock_outlives_its_directory(state_root: Path) -> None:
    from labctl.dockerhost.vm import lock_file, vm_dir

    assert vm_dir().path not in lock_file().parents
    assert lock_file().parent == vm_dir().path.parent


def test_state_json_is_typed_everywhere() -> None:
    """No string-key access to the lab state is left in labctl, tests or benchmarks."""
    offenders = []
    for base in ("labctl", "tests", "benchmarks"):
        for path in (REPO / base).rglob("*.py"):
            if path == Path(__file__):
                continue
            text = path.read_text()
            for needle in ('load_state()["', "load_state().get(", 'state["nodes"]',
                           "state.get(\"nodes\""):
                if needle in text:
                    offenders.append(f"{path.relative_to(REPO)}: {needle}")
    assert offenders == []


def test_lab_json_is_written_atomically(tmp_path: Path) -> None:
    lab = load_lab(REPO / "topologies/two-node.yaml")
    labdir = LabDir(lab.name, root=tmp_path)
    labdir.create(lab)
    assert json.loads(labdir.lab_file.read_text())["name"] == lab.name
    assert sorted(os.listdir(labdir.path)) == ["lab.json"]
