"""`labctl run`'s commands are made from one table (labctl.runners.options): every example of
the catalogue has its command, each command takes what its entry declares, and the values
reach the runners as the catalogue entry and run options they pick."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

import labctl.cli.app  # noqa: F401  (registers every run command: the workloads' too)
from labctl.cli.run import add_command, run_app
from labctl.errors import UsageError
from labctl.runners.example_spec import KNOWN_OPTIONS, check_options
from labctl.runners.examples import EXAMPLES, pingpong_variant
from labctl.runners.options import (
    ALL_COMMAND,
    CUSTOM_COMMAND,
    RUN_COMMANDS,
    SIZE,
    STORAGE_COMMANDS,
    RunCommand,
    RunOption,
)

COMMANDS = get_command(run_app).commands  # type: ignore[attr-defined]
EVERY_RUN_OPTION = ("timeout", "as_json", "show_output", "capture", "capture_dir", "pairs",
                    "jobs", "lab")


def test_every_example_of_the_catalogue_has_its_command_in_order() -> None:
    assert [c.name for c in RUN_COMMANDS] == list(dict.fromkeys(n for n, _ in EXAMPLES))
    # rdma-core-tests: one node's test suite, not a pair's example (labctl/cli/run_rdma_core_tests);
    # ucx, ucx-info, mpi: the workloads of labctl/cli/run_workloads.py
    assert list(COMMANDS) == [*(c.name for c in RUN_COMMANDS), "custom",
                              *(c.name for c in STORAGE_COMMANDS), "list", "all",
                              "rdma-core-tests", "ucx", "ucx-info", "mpi"]


@pytest.mark.parametrize("command", [*RUN_COMMANDS, CUSTOM_COMMAND, ALL_COMMAND,
                                     *STORAGE_COMMANDS],
                         ids=lambda c: c.name)
def test_each_command_takes_what_its_entry_declares(command: RunCommand) -> None:
    params = {p.name: p for p in COMMANDS[command.name].params}
    declared = [*command.options, command.server, command.client]
    assert set(params) == {o.name for o in declared} | set(EVERY_RUN_OPTION)
    for option in declared:
        param = params[option.name]
        flags = [*param.opts, *(f"{a}/{b}" for a, b in zip(param.opts, param.secondary_opts,
                                                           strict=False))]
        # a short letter the C tool reads otherwise is left out (tests/unit/test_c_tool_letters.py)
        kept = command.flags_of(option)
        assert set(kept) <= set(flags), option.name
        assert not (set(option.flags) - set(kept)) & set(flags), option.name
        assert getattr(param, "help", None) == option.help or not option.flags
        assert param.required == (option.default is ...), option.name
        if not param.required:
            assert param.default == option.default, option.name


def _defaults(command: RunCommand, **given: Any) -> dict[str, Any]:
    values = {p.name: p.default for p in COMMANDS[command.name].params}
    return {**values, **given}


@pytest.mark.parametrize("command", RUN_COMMANDS, ids=lambda c: c.name)
def test_the_defaults_pick_a_catalogue_entry_and_valid_run_options(
        command: RunCommand) -> None:
    assert command.variant is not None
    values = _defaults(command, test="ib_send_bw")
    assert (command.name, command.variant(values)) in EXAMPLES
    options = command.run_options(values)
    assert set(options) <= KNOWN_OPTIONS and list(options)[-1] == "timeout"
    assert check_options(options) == options


@pytest.mark.parametrize(("given", "variant"), [
    ({}, "rc"),
    ({"transport": "srq"}, "srq"),
    ({"impl": "python"}, pingpong_variant("python", "python")),
    ({"client_impl": "python"}, pingpong_variant("c", "python")),
    ({"impl": "python", "client_impl": "c"}, pingpong_variant("python", "c")),
])
def test_pingpong_values_pick_the_transport_and_implementations(
        given: dict[str, str], variant: str) -> None:
    pingpong = RUN_COMMANDS[0]
    assert pingpong.variant is not None
    assert pingpong.variant(_defaults(pingpong, **given)) == variant


def test_mckey_one_qp_and_perftest_test_pick_their_variants() -> None:
    by_name = {c.name: c for c in RUN_COMMANDS}
    mckey, perftest = by_name["mckey"], by_name["perftest"]
    assert mckey.variant and perftest.variant
    assert mckey.variant(_defaults(mckey, one_qp=True)) == "ud-1qp"
    assert perftest.variant(_defaults(perftest, test="ib_atomic_bw")) == "ib_atomic_bw"
    with pytest.raises(UsageError, match="unknown perftest 'ib_nope'"):
        perftest.variant(_defaults(perftest, test="ib_nope"))


def test_a_new_entry_becomes_a_command_whose_values_reach_its_action() -> None:
    """What adding an example's command takes: an entry; the generator does the rest."""
    app = typer.Typer()
    seen: list[tuple[str, dict[str, Any]]] = []

    def action(command: RunCommand, values: dict[str, Any]) -> None:
        seen.append((command.name, values))

    demo = RunCommand("demo", "A demo.", (
        RunOption("mode", ("--mode",), str, "A mode.", default="a", choices=("a", "b"),
                  leading=True),
        SIZE.but("Bytes.", default=8),
    ))
    add_command(app, demo, action)
    add_command(app, RunCommand("other", "Another.", ()), action)
    runner = CliRunner()
    result = runner.invoke(app, ["demo", "--size", "64", "--server", "n1", "--json"])
    assert result.exit_code == 0, result.output
    name, values = seen[-1]
    assert name == "demo"
    assert values == {"mode": "a", "server": "n1", "client": None, "size": 64,
                      "timeout": None, "as_json": True, "show_output": False, "capture": False,
                      "capture_dir": None, "pairs": "first", "jobs": 1, "lab": None}
    assert demo.run_options(values) == {"size": 64, "timeout": None}
    help_text = runner.invoke(app, ["demo", "--help"], env={"COLUMNS": "100"}).output
    assert "[a|b]" in help_text and "Bytes." in help_text
    # a run option is checked as it is parsed: exit 2, the runners' own message
    with pytest.raises(UsageError, match="--size must be a whole number from 1 to"):
        runner.invoke(app, ["demo", "--size", "0"], catch_exceptions=False)
