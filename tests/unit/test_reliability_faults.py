"""The fault hook (labctl/testpoints.py), the in-node time bound, and what `down` finds.

No VM here: the live counterparts are tests/integration/test_reliability*.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import labctl.providers.qemu as qemu_module
import labctl.vm.machine as machine_module
from labctl import testpoints
from labctl.providers.qemu import QemuProvider
from labctl.runners.execute import bounded_in_node
from labctl.store.labdir import LabDir
from labctl.store.state import LabState, Phase
from labctl.topology.load import load_lab

REPO = Path(__file__).resolve().parents[2]


def test_parse_spec() -> None:
    assert testpoints.parse("netns") == ("netns", None, "raise")
    assert testpoints.parse("disk@node2:kill") == ("disk", "node2", "kill")
    assert testpoints.parse("booted:int") == ("booted", None, "int")


def test_no_fault_without_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(testpoints.ENV, raising=False)
    signals: list[tuple[int, int]] = []  # a fault's kill or Ctrl-C, recorded, not sent
    monkeypatch.setattr(testpoints.os, "kill", lambda pid, sig: signals.append((pid, sig)))
    assert testpoints.STEPS
    for step in testpoints.STEPS:
        assert testpoints.fault_point(step, "node1") is None  # returns: no InjectedFault
    assert signals == []


def test_only_the_named_step_and_node_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(testpoints.ENV, "disk@node2")
    testpoints.fault_point("netns")
    testpoints.fault_point("disk", "node1")
    with pytest.raises(testpoints.InjectedFault, match=r"disk@node2"):
        testpoints.fault_point("disk", "node2")
    monkeypatch.setenv(testpoints.ENV, "disk")  # no node: the first node to get there
    with pytest.raises(testpoints.InjectedFault):
        testpoints.fault_point("disk", "node1")


def test_int_mode_is_a_keyboard_interrupt_at_that_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(testpoints.ENV, "state:int")
    reached = []
    with pytest.raises(KeyboardInterrupt):
        testpoints.fault_point("state")
        reached.append("after")
    assert reached == []


def test_hold_mode_waits_for_its_release_file(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    release = tmp_path / "go"
    monkeypatch.setenv(testpoints.ENV, "booted:hold")
    monkeypatch.setenv(testpoints.RELEASE_ENV, str(release))
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:  # the release comes during the third wait
        sleeps.append(seconds)
        if len(sleeps) == 3:
            release.touch()

    monkeypatch.setattr(testpoints.time, "sleep", sleep)
    testpoints.fault_point("booted")  # returns: a hold is no failure
    assert len(sleeps) == 3
    testpoints.fault_point("booted")  # released: no wait
    assert len(sleeps) == 3


def test_hold_mode_gives_up_after_its_bound(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    monkeypatch.setenv(testpoints.ENV, "booted:hold")
    monkeypatch.setenv(testpoints.RELEASE_ENV, str(tmp_path / "never"))
    clock = iter(range(0, 1000, 30))
    monkeypatch.setattr(testpoints.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(testpoints.time, "sleep", lambda seconds: None)
    testpoints.fault_point("booted")  # 120 s of the fake clock, then on
    assert next(clock) <= testpoints.HOLD_SECONDS + 60


def test_kill_mode_kills_the_process() -> None:
    code = "from labctl import testpoints; testpoints.fault_point('booted'); print('survived')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, env={**os.environ, testpoints.ENV: "booted:kill"},
                            check=False)
    assert result.returncode == -signal.SIGKILL
    assert "survived" not in result.stdout


def test_every_step_has_exactly_one_point_in_the_qemu_provider() -> None:
    source = Path(qemu_module.__file__).read_text() + Path(machine_module.__file__).read_text()
    called = re.findall(r'fault_point\("([a-z-]+)"', source)
    assert sorted(called) == sorted(testpoints.STEPS)


def test_in_node_bound_exits_124_through_a_shell() -> None:
    # sshd runs the command through a shell that execs it, as here. With the former
    # `timeout --signal=KILL`, timeout killed its own process group: the shell died of
    # SIGKILL and ssh reported 255, so a timed-out run never said "timed out".
    argv = bounded_in_node(["sleep", "30"], 1)
    started = time.monotonic()
    result = subprocess.run(["bash", "-c", " ".join(argv)], check=False,
                            start_new_session=True)
    assert result.returncode == 124
    assert time.monotonic() - started < 10
    old = subprocess.run(["bash", "-c", "timeout --signal=KILL 1 sleep 30"], check=False,
                         start_new_session=True)
    assert old.returncode == -signal.SIGKILL  # what ssh turned into 255


def _lab_dir(tmp_path: Path, name: str) -> LabDir:
    lab = load_lab(REPO / "topologies/two-node.yaml")
    labdir = LabDir(name, root=tmp_path)
    labdir.create(dataclasses.replace(lab, name=name))
    return labdir


def test_down_stops_a_qemu_that_up_never_recorded(tmp_path: Path) -> None:
    """`up` killed between qemu's start and state.json: the node's own pidfile names it."""
    labdir = _lab_dir(tmp_path, "ut-unrecorded")
    labdir.save_state(LabState(provider="qemu", phase=Phase.CREATING, netns="labctl-ut-none"))
    node_dir = labdir.node_dir("node2")
    node_dir.mkdir(parents=True)
    # a stand-in for qemu: its command line carries the node's marker, as qemu's does
    fake = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                             "-name", "guest=labctl-ut-unrecorded-node2",
                             "-pidfile", str(node_dir / "qemu.pid")], start_new_session=True)
    try:
        cmdline = Path(f"/proc/{fake.pid}/cmdline")
        for _ in range(100):  # just after exec the kernel may still show an empty one
            if b"guest=" in cmdline.read_bytes():
                break
            time.sleep(0.05)
        (node_dir / "qemu.pid").write_text(f"{fake.pid}\n")
        provider = QemuProvider(labdir.load_lab(), labdir)
        runtimes = {r.name: r for r in provider.nodes()}
        assert runtimes["node2"].state == "unrecorded"
        assert runtimes["node1"].state == "absent"
        removed = provider.destroy()
        assert removed == [f"qemu node2 (pid {fake.pid})"]
        assert fake.wait(timeout=10) is not None
    finally:
        if fake.poll() is None:
            fake.kill()
            fake.wait()


def test_down_leaves_a_process_whose_pid_is_recycled(tmp_path: Path) -> None:
    """A pid in the pidfile that is not this node's qemu any more is left alone."""
    labdir = _lab_dir(tmp_path, "ut-recycled")
    labdir.save_state(LabState(provider="qemu", phase=Phase.UP, netns="labctl-ut-none"))
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                             start_new_session=True)
    try:
        labdir.node_dir("node1").mkdir(parents=True)
        (labdir.node_dir("node1") / "qemu.pid").write_text(f"{other.pid}\n")
        assert QemuProvider(labdir.load_lab(), labdir).destroy() == []
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def _main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
          *args: str) -> tuple[int, str, str]:
    from labctl.cli.app import main

    monkeypatch.setattr(sys, "argv", ["labctl", *args])
    capsys.readouterr()
    try:
        main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return (code if isinstance(code, int) else 1), out, " ".join(err.split())


def test_status_and_up_after_an_up_that_died_early(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A crash before any node existed: status says so (exit 1), `up` again refuses
    clearly (it used to fail with a KeyError while "repairing" nodes never made)."""
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path))
    labdir = _lab_dir(tmp_path, "ut-early")
    labdir.save_state(LabState(provider="qemu", phase=Phase.CREATING))
    code, out, err = _main(monkeypatch, capsys, "status", "--lab", "ut-early", "--json")
    assert code == 1
    (lab,) = json.loads(out)["labs"]
    nodes = lab["nodes"]
    assert [(n["state"], n["reason"]) for n in nodes] == [("absent", "never started")] * 2
    assert "`up` did not finish (phase creating)" in err
    topology = tmp_path / "ut-early.yaml"
    topology.write_text("name: ut-early\nnodes: {node1: {}, node2: {}}\n"
                        "links: [{endpoints: [node1:eth1, node2:eth1]}]\n")
    code, _, err = _main(monkeypatch, capsys, "up", str(topology))
    assert code == 1
    assert "was never fully created" in err
    assert "Traceback" not in err
    assert "labctl down --lab ut-early" in err
