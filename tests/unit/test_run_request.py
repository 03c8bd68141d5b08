"""`labctl run` hands the runners one typed request, checked once: the run options
(CheckedOptions, read-only, taken as they are by run_example), the pairs, the lab and how
results are shown. A plain dict given to a runner (the pytest plugin, benchmarks) is still
checked there."""

from __future__ import annotations

from typing import Any

import pytest

from labctl.cli import run as run_cli
from labctl.errors import UsageError
from labctl.runners import example_spec
from labctl.runners.example_spec import CheckedOptions, check_options, checked
from labctl.runners.execute import RunResult
from labctl.runners.request import PairChoice, RunRequest
from tests.unit.clirun import run_main


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """`run` without a lab: each run's example variant and the options it was given, and
    every call of check_options counted (as "check" entries)."""
    seen: list[tuple[str, dict[str, Any]]] = []
    real = example_spec.check_options

    def counting(options: dict[str, Any]) -> CheckedOptions:
        seen.append(("check", dict(options)))
        return real(options)

    monkeypatch.setattr(example_spec, "check_options", counting)
    monkeypatch.setattr(run_cli, "check_options", counting)
    monkeypatch.setattr(RunRequest, "open", lambda self: (None, [("node1", "node2")]))

    def runner(capture: bool, capture_dir: object, **kwargs: object) -> Any:
        def run(handle: object, spec: Any, server: str, client: str,
                options: dict[str, Any]) -> RunResult:
            seen.append((spec.variant, options))
            checked(options)  # what run_example does first
            return RunResult(spec.name, spec.variant, server, client, "passed")
        return run

    monkeypatch.setattr(run_cli, "captured_runner", runner)
    return seen


def test_run_checks_its_options_once(ran: list[tuple[str, dict[str, Any]]],
                                     monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(monkeypatch, capsys, "run", "pingpong", "--transport", "rc",
                            "--size", "64")
    assert code == 0, err
    (check, options), (variant, given) = ran
    assert check == "check" and options["size"] == 64
    assert variant == "rc" and isinstance(given, CheckedOptions) and given["size"] == 64


def test_a_bad_value_is_refused_before_the_lab(ran: list[tuple[str, dict[str, Any]]],
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(monkeypatch, capsys, "run", "pingpong", "--pairs", "all",
                            "--server", "node1")
    assert code == 2
    assert "--server/--client choose the first pair only" in err and "hint:" in err
    assert [entry for entry in ran if entry[0] != "check"] == []  # nothing ran


def test_checked_options_are_read_only_and_changed_with_a_check() -> None:
    options = check_options({"size": 64, "group": None, "timeout": 30})
    with pytest.raises(TypeError, match="read-only"):
        options["size"] = 2**40
    with pytest.raises(TypeError, match="read-only"):
        options.update(size=2**40)
    assert options.but(group="239.1.2.1")["group"] == "239.1.2.1"
    with pytest.raises(UsageError, match="--group"):
        options.but(group="10.0.0.1; reboot")
    assert checked(options) is options
    assert checked({"size": 64}) == {"size": 64}
    with pytest.raises(UsageError, match="--size"):
        checked({"size": -1})


def test_a_request_refuses_a_bad_pair_choice_when_made() -> None:
    options = check_options({"timeout": 30})
    with pytest.raises(UsageError, match="--jobs"):
        RunRequest(options, PairChoice(jobs=0), lab=None)
    assert RunRequest(options, PairChoice(), lab=None).choice.jobs == 1
