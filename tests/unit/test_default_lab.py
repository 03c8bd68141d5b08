"""The default lab: --lab, else LABCTL_LAB, else the only lab that is up; and `down --lab`
for a lab that does not exist answers "did you mean" (exit 2)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from labctl.errors import UsageError
from labctl.store.labdir import LabDir, find_labdir
from labctl.store.state import LabState, Phase
from labctl.topology.load import load_lab
from tests.unit.clirun import run_main

REPO = Path(__file__).resolve().parents[2]


def _lab(name: str) -> LabDir:
    lab = dataclasses.replace(load_lab(REPO / "topologies" / "two-node.yaml"), name=name)
    labdir = LabDir(name)
    labdir.create(lab)
    labdir.save_state(LabState(provider="qemu", phase=Phase.UP))
    return labdir


def test_labctl_lab_chooses_among_several_labs(state_root: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _lab("ut-one")
    _lab("ut-two")
    with pytest.raises(UsageError, match="several labs are up") as exc:
        find_labdir(None)
    assert exc.value.hint and "LABCTL_LAB=NAME" in exc.value.hint
    monkeypatch.setenv("LABCTL_LAB", "ut-two")
    assert find_labdir(None).name == "ut-two"
    assert find_labdir("ut-one").name == "ut-one"  # --lab wins


def test_a_command_follows_labctl_lab(state_root: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    _lab("ut-one")
    two = _lab("ut-two")
    console = two.node_dir("node1") / "console.log"
    console.parent.mkdir(parents=True)
    console.write_text("ut-two's node1\n")
    monkeypatch.setenv("LABCTL_LAB", "ut-two")
    code, out, err = run_main(monkeypatch, capsys, "logs", "node1")
    assert (code, out) == (0, "ut-two's node1\n"), err


@pytest.mark.parametrize(("value", "message", "hint"), [
    ("ut-gone", "error: no lab named 'ut-gone' is up (LABCTL_LAB names it)",
     "unset LABCTL_LAB or give --lab NAME"),
    ("../x", "error: LABCTL_LAB: bad lab name '../x'", "set LABCTL_LAB to a lab's name"),
])
def test_a_wrong_labctl_lab_exits_2_saying_so(
        value: str, message: str, hint: str, state_root: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _lab("ut-one")
    monkeypatch.setenv("LABCTL_LAB", value)
    code, out, err = run_main(monkeypatch, capsys, "logs", "node1")
    assert code == 2 and out == ""
    assert err.startswith(message), err
    assert hint in err


def test_down_of_a_lab_that_does_not_exist_says_did_you_mean(
        state_root: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    labdir = _lab("ut-clisee")
    code, out, err = run_main(monkeypatch, capsys, "down", "--lab", "ut-clisea")
    assert code == 2 and out == ""
    assert err.splitlines() == ["error: no lab named 'ut-clisea'",
                                "hint: did you mean ut-clisee? labs: ut-clisee"]
    assert labdir.path.is_dir()  # nothing removed
    code, _, err = run_main(monkeypatch, capsys, "down", "--lab", "zzzz")
    assert code == 2 and err.splitlines()[1] == "hint: labs: ut-clisee"


def test_down_with_no_lab_at_all(state_root: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(monkeypatch, capsys, "down", "--lab", "ut-x")
    assert code == 2 and "hint: no lab exists; nothing to remove" in err
    code, out, _ = run_main(monkeypatch, capsys, "down")  # nothing named: still idempotent
    assert code == 0 and "nothing to remove" in out


def test_down_takes_the_lab_labctl_lab_names(state_root: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    one, two = _lab("ut-one"), _lab("ut-two")
    monkeypatch.setenv("LABCTL_LAB", "ut-one")
    code, out, err = run_main(monkeypatch, capsys, "down")
    assert code == 0, err
    assert "lab ut-one" in out and not one.path.exists() and two.path.is_dir()
    code, _, err = run_main(monkeypatch, capsys, "down")  # gone now: said, exit 2
    assert code == 2 and "no lab named 'ut-one' (LABCTL_LAB names it)" in err
