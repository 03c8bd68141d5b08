"""A C tool's short option letter is kept in `labctl run NAME` only where it means there
what it means here: each run command that wraps an rdma-core example carries the tool's
getopt string (libibverbs/examples, librdmacm/examples) and the letters that agree."""

from __future__ import annotations

import re
from typing import Any

import pytest

from labctl.cli.app import cli_command
from labctl.runners.options import RUN_COMMANDS, RunCommand
from tests.unit.clirun import run_main

RUN = cli_command().commands["run"]  # type: ignore[attr-defined]
WRAPPED = [c for c in RUN_COMMANDS if c.c_letters]


def _shorts(command: Any) -> dict[str, str]:
    """The command's short flags and the long option each stands for."""
    found = {}
    for param in command.params:
        for names in (list(getattr(param, "opts", [])), list(getattr(param, "secondary_opts", []))):
            longs = [n for n in names if n.startswith("--")]
            for name in names:
                if re.fullmatch(r"-[A-Za-z]", name):
                    found[name] = longs[0] if longs else param.opts[0]
    return found


def test_the_examples_that_wrap_a_c_tool_say_its_letters() -> None:
    assert {c.name for c in WRAPPED} >= {"pingpong", "rping", "ucmatose", "mckey", "udaddy",
                                         "cmtime", "rstream", "riostream", "rcopy",
                                         "rdma-server"}


@pytest.mark.parametrize("command", WRAPPED, ids=[c.name for c in WRAPPED])
def test_no_short_flag_means_another_thing_in_the_c_tool(command: RunCommand) -> None:
    letters = set(command.c_letters.replace(":", ""))
    shorts = _shorts(RUN.commands[command.name])
    clashing = {s: long for s, long in shorts.items()
                if s[1] in letters and s not in command.same_as_c}
    assert clashing == {}, f"run {command.name}: the C tool reads {sorted(clashing)} otherwise"
    assert set(command.same_as_c) <= set(shorts)  # what agrees is offered


@pytest.mark.parametrize(("args", "flag"), [
    (("run", "ucmatose", "-c", "3"), "-c"),  # ucmatose -c: connections, not our --count
    (("run", "rping", "-s", "64"), "-s"),  # rping -s: be the server
    (("run", "rping", "-q"), "-q"),  # rping -q: create its own QP
    (("run", "pingpong", "-t", "ud"), "-t"),  # ibv_rc_pingpong -t: timestamps
    (("run", "pingpong", "-j", "2"), "-j"),  # ibv_rc_pingpong -j: device memory
    (("run", "udaddy", "-s", "64"), "-s"),  # udaddy -s: the server's address
])
def test_a_misleading_letter_is_an_unknown_option(args: tuple[str, ...], flag: str,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(monkeypatch, capsys, *args)
    assert code == 2 and f"error: no such option: {flag}" in err


def test_the_letters_that_agree_still_work() -> None:
    pingpong = _shorts(RUN.commands["pingpong"])
    assert pingpong == {"-s": "--size", "-n": "--iters", "-m": "--mtu", "-p": "--port"}
    assert _shorts(RUN.commands["rping"]) == {"-p": "--port", "-v": "--verbose",
                                              "-j": "--jobs"}
    assert _shorts(RUN.commands["ucmatose"])["-p"] == "--port"
