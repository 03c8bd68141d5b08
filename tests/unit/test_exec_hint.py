"""`labctl exec node1 ls -la` (no `--`): click takes -la for an option of exec's own; the
answer says to put the command after `--`, with the line to type (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.clirun import run_main


@pytest.mark.parametrize(("args", "error", "hint"), [
    (["node1", "ls", "-la"], "no such option: -la (an option of the command's goes after `--`)",
     "put the command after `--`: labctl exec node1 -- ls -la"),
    (["node1", "--lab", "lab1", "ls", "-la", "/tmp"], "no such option: -la",
     "labctl exec --lab lab1 node1 -- ls -la /tmp"),
    (["--all", "ip", "-br", "addr"], "no such option: -br",
     "labctl exec --all -- ip -br addr"),
    (["node1", "cat", "--show-all", "a b"], "no such option: --show-all",
     "labctl exec node1 -- cat --show-all 'a b'"),
])
def test_a_commands_option_before_double_dash_gets_a_hint(
        args: list[str], error: str, hint: str, state_root: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(monkeypatch, capsys, "exec", *args)
    assert code == 2 and out == ""
    first, second = err.splitlines()[:2]
    assert first == f"error: {error}" or first.startswith(f"error: {error}"), err
    assert second.startswith("hint: usage: labctl exec ") and hint in second, err
    assert second.endswith("; see `labctl exec -h`"), err


def test_other_usage_errors_of_exec_keep_their_message(
        state_root: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(monkeypatch, capsys, "exec", "--lab")
    assert code == 2 and "--lab" in err and "requires an argument" in err
    code, _, err = run_main(monkeypatch, capsys, "exec", "node1", "--", "ls", "-la")
    assert code == 2 and "no lab is up" in err  # `--` given: parsed, the lab is looked for
