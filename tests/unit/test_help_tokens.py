"""Help never breaks inside a token: every command's and group's --help rendered at 80 and
100 columns holds each word of its help source (option names, metavars such as
`first|adjacent|all|A:B,C:D`, help texts, docstrings) whole, never folded across lines or
cut with an ellipsis."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.unit.clirun import run_main
from tests.unit.test_help_style import TREE

BOX = re.compile(r"[│╭╮╰╯─]")



def source_tokens(command: Any) -> set[str]:
    """The words the help of `command` is made from, as written."""
    texts = [command.help or ""]
    for param in command.params:
        if param.param_type_name == "option":  # an argument's name is internal
            texts += [" ".join(param.opts), " ".join(param.secondary_opts)]
        texts += [getattr(param, "help", None) or "", str(param.metavar or "")]
    for sub in getattr(command, "commands", {}).values():
        texts.append(sub.short_help or (sub.help or "").split("\n\n")[0])
    return {word for text in texts for word in text.split() if len(word) > 1 and word != "\b"}


def test_the_source_has_long_tokens() -> None:
    """The check below has something to find: the tokens that broke once are there."""
    run = dict(TREE)[("run", "pingpong")]
    assert "first|adjacent|all|A:B,C:D" in source_tokens(run)


@pytest.mark.parametrize("width", [80, 100])
@pytest.mark.parametrize(("path", "command"), TREE,
                         ids=[" ".join(p) or "labctl" for p, _ in TREE])
def test_help_keeps_every_token_whole(width: int, path: tuple[str, ...], command: Any,
                                      monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setenv("TERM", "dumb")
    code, out, err = run_main(monkeypatch, capsys, *path, "-h")
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= width
    words = " ".join(BOX.sub(" ", out).split())  # lines joined: a folded token stays split
    broken = sorted(t for t in source_tokens(command) if t not in words)
    assert broken == [], f"{' '.join(path)} -h at {width} columns breaks {broken}"
