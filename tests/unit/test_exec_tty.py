"""`labctl exec NODE` without a command: a terminal is asked for only at a terminal.

dropbear (the nodes' ssh server) hangs up a terminal session at its input's end, so
`labctl exec NODE < script` with a forced terminal ran nothing; without one the node's
shell reads the script to its end, as `ssh NODE < script` does."""

from __future__ import annotations

import io
from typing import Any

import pytest

from labctl.cli import exec_


class Ran(Exception):
    """os.execvp was reached (labctl's process would have become ssh)."""


class FakeHandle:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str], bool]] = []

    def argv(self, node: str, command: list[str], *, tty: bool = False) -> list[str]:
        self.calls.append((node, command, tty))
        return ["ssh", node]


class Stdin(io.StringIO):
    def __init__(self, terminal: bool) -> None:
        super().__init__("")
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


def _exec(monkeypatch: pytest.MonkeyPatch, command: list[str] | None,
          terminal: bool) -> tuple[str, list[str], bool]:
    handle = FakeHandle()
    monkeypatch.setattr(exec_, "open_lab", lambda lab: handle)

    def execvp(_file: str, _argv: list[str]) -> Any:
        raise Ran

    monkeypatch.setattr(exec_.os, "execvp", execvp)
    monkeypatch.setattr(exec_.sys, "stdin", Stdin(terminal))
    with pytest.raises(Ran):
        exec_.exec_command(node="node1", command=command, all_nodes=False, as_json=False,
                           lab="demo")
    [call] = handle.calls
    return call


def test_a_shell_at_a_terminal_gets_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _exec(monkeypatch, None, terminal=True) == ("node1", [], True)


def test_a_shell_fed_from_a_pipe_or_file_gets_none(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _exec(monkeypatch, None, terminal=False) == ("node1", [], False)


@pytest.mark.parametrize("terminal", [True, False])
def test_a_command_never_gets_one(monkeypatch: pytest.MonkeyPatch, terminal: bool) -> None:
    assert _exec(monkeypatch, ["ibv_devices"], terminal=terminal) == (
        "node1", ["ibv_devices"], False)
