"""One error voice: click's usage errors (unknown option, missing argument, bad value),
pydantic's (a topology that fails validation) and labctl's own UsageError all print
`error: ...` then `hint: ...`, the message's first word lowercase; piped (stderr not a
terminal) each is one line however long, at a terminal the console folds it."""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import labctl.cli.report as report
from labctl.cli.app import lowercase_first, typed_command
from labctl.errors import UsageError
from tests.unit.clirun import run_main

ROOT = Path(__file__).resolve().parents[2]
BAD = Path(__file__).parent / "topology" / "bad"
LONG = "x" * 200

CASES = [
    ("click: unknown option", ("status", "--no-such-option"), "no such option: --no-such-option"),
    ("click: missing argument", ("cp", "only-src"), "missing argument 'DST'"),
    ("click: bad value", ("run", "pingpong", "--iters", "many"), "invalid value for '--iters'"),
    ("click: unknown command", ("frobnicate",), "no such command 'frobnicate'"),
    ("click: a long bad value", ("bench", "--iters", LONG), "invalid value for '--iters'"),
    ("pydantic: topology", ("validate", str(BAD / "defaults-memory-string.yaml")),
     "defaults.memory: must be an integer (got '1G')"),
    ("pydantic: a long one", ("validate", str(BAD / "mounts-etc-ro.yaml")),
     "the host folder '/etc' is a system directory of the host"),
    ("labctl: UsageError", ("status", "--lab", "Bad_Name"), "bad lab name 'Bad_Name'"),
    ("labctl: a bad choice", ("up", "two-node", "--provider", "zz"),
     "--provider must be qemu, docker or vagrant (got 'zz')"),
]


@pytest.fixture(autouse=True)
def _narrow(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path))


def _assert_voice(err: str, says: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 2, err  # one line each, though piped at 80 columns
    assert lines[0].startswith("error: ") and lines[1].startswith("hint: "), err
    first = lines[0].removeprefix("error: ")
    assert not re.match(r"[A-Z][a-z]", first), f"not lowercase: {first}"
    assert says in lines[0], err
    assert "Traceback" not in err and "╭" not in err


@pytest.mark.parametrize(("name", "args", "says"), CASES, ids=[c[0] for c in CASES])
def test_every_usage_error_speaks_one_voice(name: str, args: tuple[str, ...], says: str,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(monkeypatch, capsys, *args)
    assert code == 2, err
    _assert_voice(err, says)


def test_long_errors_stay_one_line_when_piped(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The corpus's long messages are longer than 80 columns: not folded on a pipe."""
    code, _, err = run_main(monkeypatch, capsys, "validate", str(BAD / "mounts-etc-ro.yaml"))
    assert code == 2 and len(err.splitlines()[0]) > 80 and len(err.splitlines()) == 2


def test_a_real_process_piped(tmp_path: Path) -> None:
    env = {**os.environ, "LABCTL_STATE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT),
           "COLUMNS": "80"}
    for args, says in ((("validate", str(BAD / "mounts-etc-ro.yaml")), "/etc"),
                       (("run", "pingpong", "--no-such"), "no such option: --no-such")):
        done = subprocess.run([sys.executable, "-m", "labctl", *args], capture_output=True,
                              text=True, env=env, timeout=60, check=False)
        assert done.returncode == 2
        _assert_voice(done.stderr, says)


def test_at_a_terminal_the_console_folds_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    screen = io.StringIO()
    monkeypatch.setattr(report, "err_console", Console(file=screen, force_terminal=True,
                                                       width=60, color_system=None))
    report.print_error(UsageError("word " * 30, hint="more " * 30))
    lines = screen.getvalue().splitlines()
    assert len(lines) > 2 and all(len(line) <= 60 for line in lines)
    assert lines[0].startswith("error: ") and any(ln.startswith("hint: ") for ln in lines)


def test_lowercase_first_keeps_names_and_acronyms() -> None:
    assert lowercase_first("No such option: --x") == "no such option: --x"
    assert lowercase_first("Missing argument 'NODE'.") == "missing argument 'NODE'."
    for kept in ("RDMA device gone", "NODE:IF is bad", "IPv4 only", "--x is bad", "x"):
        assert lowercase_first(kept) == kept


def test_a_usage_error_without_hint_gets_one(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    import labctl.cli.topologies

    def refused() -> None:
        raise UsageError("refused for the test")

    monkeypatch.setattr(labctl.cli.topologies, "topology_rows", refused)
    code, _, err = run_main(monkeypatch, capsys, "topologies")
    assert (code, err) == (2, "error: refused for the test\nhint: see `labctl topologies -h`\n")
    assert typed_command(["run", "pingpong", "--iters", "3"]) == "labctl run pingpong"


def _usage_errors_without_hint() -> list[str]:
    found = []
    for path in sorted((ROOT / "labctl").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "UsageError" and len(node.args) < 2
                    and not any(k.arg == "hint" for k in node.keywords)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_usage_error_in_the_code_has_a_hint() -> None:
    assert _usage_errors_without_hint() == []
