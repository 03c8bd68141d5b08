"""One help style (issue 34, item 3): -h everywhere, usage errors in labctl's own
`error:`/`hint:` form, help text that reads as sentences, one meaning per short flag."""

from __future__ import annotations

import enum
import itertools
import re
from pathlib import Path
from typing import Any

import pytest

from labctl.cli.app import cli_command
from tests.unit.clirun import run_main

WIDTH = 80
BOX = ("╭", "╰", "│")


def _walk(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every command and group of the tree, with the words that reach it."""
    found = [(path, command)]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        found += _walk(sub, (*path, name))
    return found


TREE = _walk(cli_command())
LEAVES = [(path, cmd) for path, cmd in TREE if not hasattr(cmd, "commands")]
GROUPS = [(path, cmd) for path, cmd in TREE if hasattr(cmd, "commands")]


def _ids(items: list[tuple[tuple[str, ...], Any]]) -> list[str]:
    return [" ".join(path) or "labctl" for path, _ in items]


def _bad_value(command: Any) -> tuple[str, str] | None:
    """An option of the command and a value its type refuses (a whole number or a
    choice), or None when it has no such option."""
    for param in command.params:
        if not getattr(param, "opts", None) or getattr(param, "is_flag", False):
            continue
        if not param.opts[0].startswith("--"):
            continue
        # typer >= 0.20 keeps the annotation, click's type is made when parsing
        kind = getattr(getattr(param, "type_descriptor", None), "annotation", None)
        if kind in (int, float):
            return param.opts[0], "abc"
        if isinstance(kind, type) and issubclass(kind, enum.Enum):
            return param.opts[0], "no-such-choice"
    return None


@pytest.fixture(autouse=True)
def _columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.setenv("TERM", "dumb")


def _assert_labctl_usage_error(code: int, out: str, err: str) -> None:
    assert code == 2, (out, err)
    assert err.startswith("error: "), err
    said = " ".join(err.split())  # the console wraps long lines
    assert "\nhint: usage: labctl " in err and said.endswith(" -h`"), err
    assert not any(mark in err for mark in BOX), err
    assert "Traceback" not in err and "Error ─" not in err


@pytest.mark.parametrize(("path", "command"), TREE, ids=_ids(TREE))
def test_every_command_and_group_takes_dash_h(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str],
                                               path: tuple[str, ...], command: Any) -> None:
    code, out, err = run_main(monkeypatch, capsys, *path, "-h")
    assert code == 0, err
    assert "Usage:" in out and " ".join(path) in out
    assert "-h" in out and "--help" in out  # listed in the options panel too


@pytest.mark.parametrize(("path", "command"), TREE, ids=_ids(TREE))
def test_unknown_option_is_a_labctl_usage_error(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str],
                                                path: tuple[str, ...], command: Any) -> None:
    code, out, err = run_main(monkeypatch, capsys, *path, "--no-such-option")
    _assert_labctl_usage_error(code, out, err)
    assert "no such option: --no-such-option" in err


BAD_VALUES = [(path, cmd, bad) for path, cmd in LEAVES if (bad := _bad_value(cmd))]


@pytest.mark.parametrize(("path", "command", "bad"), BAD_VALUES,
                         ids=_ids([(p, c) for p, c, _ in BAD_VALUES]))
def test_bad_value_is_a_labctl_usage_error(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str],
                                           path: tuple[str, ...], command: Any,
                                           bad: tuple[str, str]) -> None:
    option, value = bad
    code, out, err = run_main(monkeypatch, capsys, *path, option, value)
    _assert_labctl_usage_error(code, out, err)
    assert option in err


def test_most_commands_have_a_bad_value_case() -> None:
    """The bad-value test reaches the commands with a number or choice option: 18 of 38
    commands when this was written. A floor, so that a change in how options are typed
    cannot leave the bad-value test with nothing to try."""
    assert len(BAD_VALUES) >= 15, [" ".join(path) for path, _, _ in BAD_VALUES]


@pytest.mark.parametrize("args", [
    ("run", "pingpong", "--iters", "nan"),
    ("run", "pingpong", "--iters", "abc"),
    ("bench", "--iters", "1e3"),
    ("cp", "only-one-argument"),
    ("no-such-command",),
    ("run", "no-such-example"),
    ("link", "set", "node1:eth1", "--mtu", "x" * 100_000),
], ids=["nan", "abc", "float-for-int", "missing-argument", "unknown-command",
        "unknown-subcommand", "huge-value"])
def test_usage_errors_from_click(monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str], args: tuple[str, ...]) -> None:
    code, out, err = run_main(monkeypatch, capsys, *args)
    _assert_labctl_usage_error(code, out, err)
    assert len(err) < 1000  # a hostile value is cut, never echoed whole


def test_version_and_bare_group_keep_their_exits(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(monkeypatch, capsys, "--version")
    assert code == 0 and out.startswith("labctl ")
    code, out, err = run_main(monkeypatch, capsys, "run")  # a group alone: help, exit 2
    assert code == 2 and "Usage:" in out and "error:" not in err
    code, out, err = run_main(monkeypatch, capsys)
    assert code == 2 and "Commands" in out and "error:" not in err


def _panel_rows(text: str, title: str) -> list[tuple[int, int, list[str]]]:
    """The rows of a help panel: (text column, its width, the row's description lines)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"╭─ {title} "))
    rows: list[tuple[int, int, list[str]]] = []
    for line in lines[start + 1:]:
        if line.startswith("╰"):
            break
        inner = line[1:line.rindex("│")]
        match = re.match(r" (\S+)( +)(\S)", inner)
        if match:
            column = match.start(3)
            rows.append((column, len(inner) - column - 1, [inner[column:].rstrip()]))
        elif rows and inner.strip():
            rows[-1][2].append(inner[rows[-1][0]:].rstrip())
    return rows


def _early_breaks(lines: list[str], width: int) -> list[str]:
    """Lines broken although the next word would have fitted: a docstring's newline."""
    return [f"{a!r} / {b!r}" for a, b in itertools.pairwise(lines)
            if b.strip() and len(a) + 1 + len(b.split()[0]) <= width]


@pytest.mark.parametrize(("path", "command"), GROUPS, ids=_ids(GROUPS))
def test_command_lists_read_as_sentences(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str],
                                         path: tuple[str, ...], command: Any) -> None:
    _, out, _ = run_main(monkeypatch, capsys, *path, "-h")
    rows = _panel_rows(out, "Commands")
    assert len(rows) == len(command.commands)
    for _, width, description in rows:
        assert not _early_breaks(description, width)


@pytest.mark.parametrize(("path", "command"), LEAVES, ids=_ids(LEAVES))
def test_command_help_reads_as_sentences(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str],
                                         path: tuple[str, ...], command: Any) -> None:
    _, out, _ = run_main(monkeypatch, capsys, *path, "-h")
    prose = out.split("╭", 1)[0].splitlines()
    usage = next(i for i, line in enumerate(prose) if line.lstrip().startswith("Usage:"))
    paragraphs: list[list[str]] = [[]]
    for line in prose[usage + 2:]:  # the docstring, after Usage and a blank line
        if line.strip():
            paragraphs[-1].append(line[1:].rstrip())
        else:
            paragraphs.append([])
    assert [p for p in paragraphs if _early_breaks(p, WIDTH - 2)] == []


def _short_flags() -> dict[str, set[str]]:
    """Every short flag of the tree and the long options it stands for."""
    found: dict[str, set[str]] = {}
    for _, command in TREE:
        for param in command.params:
            for names in (list(getattr(param, "opts", [])),
                          list(getattr(param, "secondary_opts", []))):
                shorts = [n for n in names if re.fullmatch(r"-[A-Za-z]", n)]
                longs = [n for n in names if n.startswith("--")]
                for short in shorts:
                    found.setdefault(short, set()).update(longs)
    return found


def _readme_short_flags() -> dict[str, set[str]]:
    readme = (Path(__file__).resolve().parents[2] / "docs" / "usage.md").read_text()
    table = readme.split("A short flag means one thing", 1)[1].split("\n\n", 2)[1]
    rows: dict[str, set[str]] = {}
    for line in table.splitlines()[2:]:
        short, longs = line.split("|")[1:3]
        rows[short.strip().strip("`")] = set(re.findall(r"--[a-z-]+", longs))
    return rows


def test_a_short_flag_means_one_thing_everywhere() -> None:
    """One long option per short flag (--size and bench's --sizes are both message sizes in
    bytes), and docs/usage.md's table lists exactly these."""
    flags = _short_flags()
    flags["-h"] = {"--help"}  # help options are not params
    for short, longs in flags.items():
        assert len(longs - {"--sizes"}) == 1, (short, longs)
    assert flags == _readme_short_flags()
    assert not {"-C", "-S"} & flags.keys()  # the old second letters of --count and --size


# What a value is, as the help names it (a choice lists its values instead).
PLACEHOLDERS = {
    "NODE", "NODE:IF", "NAME", "TOPOLOGY", "FILE", "FILE.pcap", "FILE.png", "FILE.svg", "DIR",
    "SECONDS", "TIME", "RATE", "COUNT", "BYTES", "BYTES,...", "PORT", "URL", "IP", "PERCENT", "MIB",
    "DEVICE", "BPF", "TEST", "SRC", "DST", "COMMAND", "COMMAND...", "'CMD'", "'PROBE'",
    "SRC:DST[:ro]", "OPCODE", "QPN", "PSN", "ID", "NODE,...", "MODULE,...", "LESSON", "HINT",
    "KERNEL", "KERNEL,...",
}
VALUE_PARAMS = [(path, cmd, param) for path, cmd in LEAVES for param in cmd.params
                if not getattr(param, "is_flag", False) and not getattr(param, "count", False)]


def _choice_values(metavar: str) -> list[str]:
    """The plain words of a choice metavar: [auto|kvm|tcg], first|adjacent|all|A:B,C:D."""
    return [v for v in re.split(r"[|,]", metavar.strip("[]")) if v.islower()]


def _completions(command: Any, param: Any, incomplete: str) -> list[str]:
    ctx = command.context_class(command, info_name=command.name)
    return [item.value for item in param.shell_complete(ctx, incomplete)]


@pytest.mark.parametrize(("path", "command", "param"), VALUE_PARAMS,
                         ids=[f"{' '.join(p)} {getattr(x, 'opts', [x.name])[0]}"
                              for p, _, x in VALUE_PARAMS])
def test_every_value_says_what_is_wanted(path: tuple[str, ...], command: Any,
                                         param: Any) -> None:
    """An explicit metavar (never typer's INTEGER or a name made from the option), and a
    choice's values are completed, all of them."""
    metavar = param.metavar
    assert metavar, f"{' '.join(path)} {param.name}: no metavar"
    if "|" in metavar and set(metavar.split("|")) <= PLACEHOLDERS:  # FILE.png|FILE.svg
        pass
    elif "|" in metavar:
        values = _choice_values(metavar)
        assert values and set(values) <= set(_completions(command, param, ""))
    elif "," in metavar and metavar.islower():  # a comma list of choices (bench --impls)
        values = metavar.split(",")
        assert set(_completions(command, param, "")) == set(values)
        assert _completions(command, param, values[0] + ",")  # the next item completes
    else:
        assert metavar.removesuffix("...") in PLACEHOLDERS or metavar in PLACEHOLDERS


def test_server_and_client_are_node_names_everywhere() -> None:
    """--server/--client take a NODE in every command that has them (run custom's commands
    are --server-cmd/--client-cmd)."""
    found = [(path, param) for path, _, param in VALUE_PARAMS
             if {"--server", "--client"} & set(getattr(param, "opts", []))]
    assert len(found) >= 2 * 14  # bench and every run example
    assert all(param.metavar == "NODE" for _, param in found), found
    custom = dict(LEAVES)[("run", "custom")]
    assert {o for p in custom.params for o in getattr(p, "opts", [])} >= {
        "--server", "--client", "--server-cmd", "--client-cmd"}


def test_ctrl_c_in_a_command_exits_130(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    import labctl.cli.topologies

    def interrupted() -> list[dict[str, Any]]:
        raise KeyboardInterrupt

    monkeypatch.setattr(labctl.cli.topologies, "topology_rows", interrupted)
    code, out, err = run_main(monkeypatch, capsys, "topologies")
    assert (code, out) == (130, "")
    assert err.startswith("interrupted") and "Traceback" not in err


def test_completion_still_answers(monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Shell completion goes through main() too (click answers it before parsing)."""
    monkeypatch.setenv("_LABCTL_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", "labctl run pingpong --transport ")
    monkeypatch.setenv("COMP_CWORD", "4")
    code, out, _ = run_main(monkeypatch, capsys)
    assert code == 0 and out.split() == ["rc", "uc", "ud", "srq"]
    monkeypatch.setenv("COMP_WORDS", "labctl capture -")
    monkeypatch.setenv("COMP_CWORD", "2")
    code, out, _ = run_main(monkeypatch, capsys)
    assert code == 0 and {"-h", "--help", "-c", "--json"} <= set(out.split())
