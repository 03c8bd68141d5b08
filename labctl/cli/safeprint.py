"""Printing what came from outside labctl: JSON that is JSON, text that is only text.

A node's reply, a program's output, a cache manifest or a lab's state file may hold NaN
(not JSON), terminal escape sequences (ESC, CSI, OSC: a window title, a hyperlink, a
cleared screen) and rich markup ("[/]", a MarkupError if parsed). Every `--json` output
goes through `print_json`; every line the CLI's consoles print goes through
`OutsideSafeConsole`, which writes control characters in the text as visible escapes
(labctl's own colours are styles, not text, and stay).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.errors import MarkupError
from rich.segment import Segment
from rich.text import Text

from labctl.bounded import printable
from labctl.errors import LabctlError


def json_text(value: Any, *, indent: int | None = 2) -> str:
    """`value` as a JSON document: never NaN or Infinity (json.dumps writes both, and no
    JSON reader takes them). A figure that is not finite is a LabctlError, not output."""
    try:
        return json.dumps(value, indent=indent, allow_nan=False)
    except ValueError as exc:  # "Out of range float values are not JSON compliant"
        raise LabctlError(
            f"cannot print the JSON output: a value is not a finite number ({exc})",
            hint="a figure read from a node or a file was NaN or infinite; run the command "
                 "without --json to see the rest, and report the output that made it") from None


def print_json(value: Any, *, indent: int | None = 2, flush: bool = False) -> None:
    """Print `value` as one JSON document on stdout (json_text)."""
    sys.stdout.write(json_text(value, indent=indent) + "\n")
    if flush:
        sys.stdout.flush()


def outside_text(value: object) -> Text:
    """A table cell or line of text that came from outside: no markup, no control
    characters."""
    return Text(printable(str(value)))


class OutsideSafeConsole(Console):
    """A rich Console whose output holds no control character that labctl did not put
    there: the text of every segment (not rich's own control segments: cursor moves of a
    progress display) goes through bounded.printable. A line whose markup does not parse
    (outside text printed as markup by mistake) is printed as plain text, not raised."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            segment if segment.control else Segment(printable(segment.text), segment.style)
            for segment in buffer)

    def print(self, *objects: Any, **options: Any) -> None:
        try:
            super().print(*objects, **options)
        except MarkupError:
            super().print(*objects, **{**options, "markup": False})
