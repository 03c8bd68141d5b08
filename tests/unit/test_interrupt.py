"""Ctrl-C as a user presses it: a real SIGINT to the process group of a real `labctl`
process, caught while the command is at work (a stand-in holds it there: a `sleep` child,
as the command's own ssh or qemu child would be). The message fits the command: nothing
more than "interrupted" for a read-only one, the lab untouched for run and exec, what was
made and the command that removes only that for up; exit 130, and nothing else changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labctl.store.labdir import LabDir
from labctl.store.state import LabState
from labctl.topology.load import load_lab
from tests.unit.clirun import run_main

ROOT = Path(__file__).resolve().parents[2]
CAPTURED = Path(__file__).parent / "outputs" / "status"
HELD = "HELD"  # the stand-in says it holds the command (then the test presses Ctrl-C)

# A labctl process whose `HOLD` (module:attribute) is replaced by a stand-in that says HELD
# on stderr once it waits in a child `sleep`, as the command waits on its own children. For
# `up`, the provider is a stand-in whose create() does the same after the lab's directory
# and state.json exist (what `up` makes before any node).
DRIVER = r"""
import importlib, os, subprocess, sys, types

def hold(*args, **kwargs):
    child = subprocess.Popen(["sleep", "30"])  # waiting before it says so: Ctrl-C reaches it
    print("HELD", file=sys.stderr, flush=True)
    child.wait()
    raise SystemExit("the stand-in was not interrupted")

where = os.environ["HOLD"]
if where == "provider":
    import labctl.lab.lifecycle as lifecycle
    from labctl.capabilities import QEMU
    import dataclasses

    class Provider:
        capabilities = dataclasses.replace(QEMU, netns=False)
        def __init__(self, lab, labdir): pass
        def check_host(self): pass
        def create(self, recorder, progress): hold()

    lifecycle.provider_for = Provider
else:
    module, attribute = where.split(":")
    owner = importlib.import_module(module)
    if "." in attribute:  # a method: Class.name
        cls, name = attribute.split(".")
        setattr(getattr(owner, cls), name, hold)
    else:
        setattr(owner, attribute, hold)
from labctl.cli.app import main
sys.argv = ["labctl", *sys.argv[1:]]
main()
"""


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "labs"
    path.mkdir()
    monkeypatch.setenv("LABCTL_STATE_DIR", str(path))
    return path


def _make_lab(state: Path, name: str) -> None:
    """A lab directory as `up` leaves it (its qemu pids long gone: the nodes are stopped)."""
    lab = dataclasses.replace(load_lab(ROOT / "topologies" / "two-node.yaml"), name=name)
    labdir = LabDir(name, state)
    labdir.create(lab)
    labdir.save_state(LabState.from_json((CAPTURED / "state.json").read_text()))


def _tree(path: Path) -> dict[str, str]:
    """Every file under `path` with a hash of its bytes: what "nothing changed" compares."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def _interrupt(state: Path, hold: str, *args: str, holds: int = 1) -> tuple[int, str]:
    """`labctl ARGS` held at `hold` (`holds` times: a command that works on every node at
    once holds once per node), then Ctrl-C: its exit code and stderr. The Ctrl-C comes once
    every stand-in waits in its child, as a terminal's reaches every ssh of the command."""
    env = {**os.environ, "LABCTL_STATE_DIR": str(state), "PYTHONPATH": str(ROOT),
           "HOLD": hold, "COLUMNS": "80"}
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, *args], env=env, cwd=ROOT,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stderr is not None
    seen = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            if line.strip() == HELD:
                holds -= 1
            if holds == 0:
                os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends
                break
        out, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = "".join(seen) + rest
    assert HELD in err, f"never held: exit {proc.returncode}\n{out}\n{err}"
    assert "Traceback" not in err, err
    after = err.split(HELD + "\n", 1)[1]  # what the command said once held
    return proc.returncode, "".join(line for line in after.splitlines(keepends=True)
                                    if line != HELD + "\n")  # exec --all: one per node


def test_read_only_command_says_interrupted_and_nothing_more(state: Path) -> None:
    code, err = _interrupt(state, "labctl.cli.doctor:check_kvm", "doctor")
    assert (code, err) == (130, "interrupted\n")


def test_status_says_interrupted_and_nothing_more(state: Path) -> None:
    _make_lab(state, "ut-int")
    before = _tree(state)
    code, err = _interrupt(state, "labctl.lab.status:collect_status", "status")
    assert (code, err) == (130, "interrupted\n")
    assert _tree(state) == before


def test_run_says_the_lab_is_untouched(state: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    _make_lab(state, "ut-int")
    before = _tree(state)
    _, status_before, _ = run_main(monkeypatch, capsys, "status", "--json")
    code, err = _interrupt(state, "labctl.cli.run:captured_runner", "run", "pingpong",
                           "--lab", "ut-int", "--timeout", "40")
    assert code == 130
    assert err == ("interrupted; the lab is untouched, do not `labctl down` it: labctl "
                   "stopped its own processes, and a program the run started in a node ends "
                   "within the run's timeout (at most 40 s)\n")  # one line, though piped
    assert _tree(state) == before
    assert run_main(monkeypatch, capsys, "status", "--json")[1] == status_before


def test_exec_all_says_the_lab_is_untouched(state: Path) -> None:
    _make_lab(state, "ut-int")
    before = _tree(state)
    code, err = _interrupt(state, "labctl.lab.handle:LabHandle.run", "exec", "--all",
                           "--lab", "ut-int", "--", "sleep", "100", holds=2)
    assert code == 130
    assert err == ("interrupted; lab ut-int is untouched, do not `labctl down` it; the "
                   "command may still run in a node where it ignores the hang-up\n")
    assert _tree(state) == before


def test_up_says_what_it_made_and_how_to_remove_only_that(
        state: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _make_lab(state, "ut-other")  # another lab, which neither up nor down may touch
    other = _tree(state / "ut-other")
    code, err = _interrupt(state, "provider", "up", "two-node", "--name", "ut-half")
    assert code == 130
    assert err.endswith(
        "interrupted; lab ut-half is half-made (`labctl status --lab ut-half` shows what): "
        "`labctl down --lab ut-half` removes it and nothing else\n"), err
    assert sorted(p.name for p in state.iterdir()) == ["ut-half", "ut-other"]
    assert LabDir("ut-half", state).load_state().phase == "creating"
    code, out, err = run_main(monkeypatch, capsys, "down", "--lab", "ut-half")
    assert code == 0 and "lab ut-half" in out, err
    assert sorted(p.name for p in state.iterdir()) == ["ut-other"]
    assert _tree(state / "ut-other") == other


def test_up_interrupted_before_it_made_anything(state: Path) -> None:
    code, err = _interrupt(state, "labctl.lab.lifecycle:up", "up", "two-node", "--name",
                           "ut-none")
    assert code == 130
    assert err.endswith("interrupted; nothing of lab ut-none was made\n"), err
    assert list(state.iterdir()) == []


def test_image_build_says_a_half_built_image_is_never_used(state: Path) -> None:
    code, err = _interrupt(state, "labctl.cli.image:build_image", "image", "build", "trixie")
    assert code == 130
    assert err == ("interrupted; no image trixie was made and no lab is touched: a "
                   "half-built image is never used, and `labctl image build trixie` builds "
                   "it again\n")
    assert list(state.iterdir()) == []


@pytest.mark.parametrize(("args", "undo"), [
    (("--loss", "5%"), "`labctl link set node1:eth1 --clear --lab ut-int` removes its netem"),
    (("--clear",), "`labctl link set node1:eth1 --clear --lab ut-int` removes its netem"),
    (("down", "--delay", "10ms"), "`labctl link set node1:eth1 up --lab ut-int` sets its "
     "carrier back and `labctl link set node1:eth1 --clear --lab ut-int` removes its netem"),
])
def test_link_set_says_how_to_undo_that_link_only(state: Path, args: tuple[str, ...],
                                                  undo: str) -> None:
    _make_lab(state, "ut-int")
    before = _tree(state)
    # a carrier change goes through the provider; netem through a command in the node
    hold = ("labctl.providers.qemu:QemuProvider.set_link_state" if "down" in args
            else "labctl.lab.handle:LabHandle.run")
    code, err = _interrupt(state, hold, "link", "set", "node1:eth1", *args,
                           "--lab", "ut-int")
    assert code == 130
    assert err == ("interrupted; node1:eth1 may be half-set (`labctl link show --lab "
                   f"ut-int` shows it): {undo}; the rest of the lab is untouched\n")
    assert _tree(state) == before


def test_fault_add_says_how_to_clear_that_link_end(state: Path) -> None:
    _make_lab(state, "ut-int")
    before = _tree(state)
    code, err = _interrupt(state, "labctl.rdmafault.apply:add_fault", "fault", "add",
                           "node2:eth1", "drop", "--opcode", "ack", "--lab", "ut-int")
    assert code == 130
    assert err == ("interrupted; a fault on node2:eth1 may be half-added: `labctl fault "
                   "clear node2:eth1 --lab ut-int` takes off that link end's faults "
                   "(`labctl fault list --lab ut-int` shows them); one not listed there goes "
                   "with `labctl down --lab ut-int`\n")
    assert _tree(state) == before
