"""labctl/cli/safeprint.py: what came from outside prints as text, and --json is JSON."""

from __future__ import annotations

import io
import math

import pytest

from labctl import bounded
from labctl.cli.safeprint import OutsideSafeConsole, json_text, outside_text
from labctl.errors import LabctlError


def _console() -> tuple[OutsideSafeConsole, io.StringIO]:
    out = io.StringIO()
    return OutsideSafeConsole(file=out, force_terminal=True, color_system="standard",
                              width=80, highlight=False), out  # as labctl's consoles


def test_text_loses_its_escape_sequences_and_labctls_styles_stay() -> None:
    """A terminal console: rich's own colour codes are written, a node's ESC is shown."""
    console, out = _console()
    console.print("[bold red]error:[/] node said \x1b]0;pwned\x07 and \x1b[2J", end="")
    written = out.getvalue()
    assert "\x1b[1;31merror:\x1b[0m" in written  # labctl's style, as rich writes it
    assert "\\x1b]0;pwned" in written and "\\x1b[2J" in written
    assert written.count("\x1b") == 2  # the style's start and end only


def test_a_line_whose_markup_does_not_parse_is_printed_as_text() -> None:
    console, out = _console()
    console.print("cache entry [/] of a manifest", end="")
    assert out.getvalue() == "cache entry [/] of a manifest"


def test_a_status_spinner_still_moves_the_cursor() -> None:
    """rich's control segments (a live display's cursor moves) are not escaped."""
    console, out = _console()
    with console.status(outside_text("step \x1b[2J")):
        pass
    written = out.getvalue()
    assert "\\x1b[2J" in written and "\x1b[?25l" in written  # hide/show cursor kept


@pytest.mark.parametrize("value", [math.nan, {"a": [math.inf]}, -math.inf])
def test_json_text_refuses_what_is_not_json(value: object) -> None:
    with pytest.raises(LabctlError) as info:
        json_text(value)
    assert info.value.hint and "not a finite number" in info.value.message


def test_printable_keeps_newline_and_tab_and_shows_the_rest() -> None:
    assert bounded.printable("a\tb\nc") == "a\tb\nc"
    assert bounded.printable("\x1b\x9b\x00\x7f\r\u202e") == "\\x1b\\x9b\\x00\\x7f\\x0d\\u202e"


def test_numbers_in_range_and_base() -> None:
    assert bounded.parse_int(" 42\n", "n", low=0, high=42) == 42
    assert bounded.parse_int("0x1f", "n", base=16) == 31
    with pytest.raises(bounded.NumberError, match=r"n is out of range \(43; expected 0\.\.42\)"):
        bounded.parse_int("43", "n", low=0, high=42)
    with pytest.raises(bounded.NumberError, match="not a whole number"):
        bounded.parse_int("4.2", "n")
    assert bounded.finite_number(3, "n") == 3
    for bad in (True, "3", math.nan, 1 << 70):
        with pytest.raises(bounded.NumberError):
            bounded.finite_number(bad, "n")
