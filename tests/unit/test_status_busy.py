"""`labctl status` on a lab whose `up` or `down` is at work (issue 34, item 4).

A child process holds the lab's real flock (through LabDir.locked, as `up` and `down` do);
`status` must say "being created by pid N" (or removed, or repaired) instead of advising
`down`, with `busy` in `--json`. lock.owner alone is never trusted: a file that names a pid
while nobody holds the flock is an ordinary unfinished lab.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from labctl.store.labdir import LabDir
from labctl.store.state import LabState, NodeState, Phase
from labctl.topology.load import load_lab
from tests.unit.clirun import run_main
from tests.unit.jsonshape import parsed

REPO = Path(__file__).resolve().parents[2]
LAB = "ut-busy"

# The child: takes the lab's lock as `up`/`down` do, says so, and holds it until stdin ends.
_HOLDER = """
import sys
from labctl.store.labdir import LabDir
with LabDir(sys.argv[1]).locked(sys.argv[2]):
    print("held", flush=True)
    sys.stdin.read()
"""


def _hold(procs: list[subprocess.Popen[str]], action: str, lab: str = LAB) -> int:
    """A child process holding `lab`'s lock for `action`; its pid once it holds it."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, lab, action], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    procs.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc.pid


def _release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0


def _lab(phase: Phase, name: str = LAB) -> LabDir:
    lab = dataclasses.replace(load_lab(REPO / "topologies/two-node.yaml"), name=name)
    labdir = LabDir(name)
    labdir.create(lab)
    labdir.save_state(LabState(provider="qemu", phase=phase,
                               nodes={"node1": NodeState(ssh_port=2222)}))
    return labdir


def _status(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            *args: str) -> tuple[int, str, str]:
    code, out, err = run_main(monkeypatch, capsys, "status", *args)
    assert "Traceback" not in out + err, err
    return code, out, " ".join(err.split())


def _record(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            lab: str = LAB) -> dict[str, Any]:
    code, out, _ = _status(monkeypatch, capsys, "--json", "--lab", lab)
    assert code == 1  # not up (yet, or any more)
    parsed("status", out)
    (record,) = json.loads(out)["labs"]
    assert isinstance(record, dict)
    return record


@pytest.mark.parametrize(("action", "phase", "words", "busy"), [
    ("up", Phase.CREATING, "being created", "creating"),
    ("up", Phase.REPAIRING, "being repaired", "repairing"),
    ("up", Phase.UP, "being repaired", "repairing"),  # a repair before its first save
    ("down", Phase.UP, "being removed", "removing"),
    ("down", Phase.CREATING, "being removed", "removing"),
])
def test_a_lab_whose_lock_is_held(action: str, phase: Phase, words: str, busy: str,
                                  state_root: Path, spawned: list[subprocess.Popen[str]],
                                  monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    _lab(phase)
    pid = _hold(spawned, action)
    code, out, err = _status(monkeypatch, capsys)
    assert code == 1
    assert f"lab {LAB}: {words} by pid {pid}; `labctl status` again when it is done" in err
    assert "labctl down" not in err  # never advise removing a lab being made
    assert f"{words} by pid {pid}" in " ".join(out.split())  # the table's title too
    record = _record(monkeypatch, capsys)
    assert record["busy"] == {"action": busy, "pid": pid}
    assert record["phase"] == str(phase)  # what state.json says, unchanged
    _release(spawned[0])
    record = _record(monkeypatch, capsys)
    assert record["busy"] is None


def test_an_up_before_it_wrote_lab_json(state_root: Path, spawned: list[subprocess.Popen[str]],
                                        monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`up` makes the directory and takes the lock before lab.json exists: a lab being
    created, not one to remove (before, `status --lab` said "no lab.json ... down")."""
    pid = _hold(spawned, "up")
    assert not LabDir(LAB).lab_file.exists()
    record = _record(monkeypatch, capsys)
    assert record == {"lab": LAB, "provider": "?", "phase": "creating", "ready_seconds": None,
                      "nodes": [], "busy": {"action": "creating", "pid": pid}}
    code, _, err = _status(monkeypatch, capsys, "--lab", LAB)
    assert code == 1 and f"being created by pid {pid}" in err and "down" not in err


def test_lock_owner_alone_is_not_trusted(state_root: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A lock.owner naming a pid (an `up` that was killed) with nobody holding the flock:
    the lab is an unfinished one, and `down` is the advice."""
    labdir = _lab(Phase.CREATING)
    (labdir.path / "lock").write_text("")
    (labdir.path / "lock.owner").write_text(f"up by pid {os.getpid()}\n")
    assert _record(monkeypatch, capsys)["busy"] is None
    _, _, err = _status(monkeypatch, capsys)
    assert f"`up` did not finish (phase creating); `labctl down --lab {LAB}` removes it" in err
    assert "being created" not in err


@pytest.mark.parametrize("owner", ["", "up by pid -1\n", "up by pid 1; rm -rf /\n",
                                   "x" * 100_000, "[red]up[/red] by pid 7\n"])
def test_a_held_lock_whose_owner_does_not_say(owner: str, state_root: Path,
                                              spawned: list[subprocess.Popen[str]],
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    labdir = _lab(Phase.CREATING)
    _hold(spawned, "up")
    (labdir.path / "lock.owner").write_text(owner)  # replaced under the holder's feet
    assert _record(monkeypatch, capsys)["busy"] == {"action": "creating", "pid": None}
    _, _, err = _status(monkeypatch, capsys)
    assert f"lab {LAB}: being created by another labctl" in err


def test_a_lock_file_that_is_a_link_or_fifo_is_not_followed(
        state_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    labdir = _lab(Phase.UP)
    target = tmp_path / "elsewhere"
    (labdir.path / "lock").symlink_to(target)
    assert labdir.lock_holder() is None and not target.exists()
    (labdir.path / "lock").unlink()
    os.mkfifo(labdir.path / "lock")
    assert labdir.lock_holder() is None  # O_NONBLOCK: never waits for a writer


def test_the_probe_never_makes_an_up_refuse(state_root: Path) -> None:
    """`status` holds a shared lock for a moment: an `up` starting then waits for it."""
    labdir = _lab(Phase.UP)
    fd = os.open(labdir.path / "lock", os.O_RDONLY | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    threading.Timer(0.1, os.close, (fd,)).start()
    with labdir.locked("up"):
        assert labdir.lock_holder() is not None  # this process holds it, on another fd
