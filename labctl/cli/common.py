"""Shared CLI pieces: consoles, progress reporting, the --lab option."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console

from labctl.cli import complete
from labctl.errors import UsageError
from labctl.providers.base import Progress
from labctl.runners.spec import check_options, check_seconds

console = Console(highlight=False, width=None if Console().is_terminal else 120)
err_console = Console(stderr=True, highlight=False)



def _check_lab(value: str | None) -> str | None:
    """--lab is checked as it is parsed: "" is refused (never "the only lab"), and so is
    any text that is not a lab name (a path, "x\\n")."""
    if value is None:
        return None
    from labctl.lab.labdir import check_lab_name  # pydantic-free, but keep startup lean

    return check_lab_name(value)


def lab_option(help: str = "Lab name (default: the only lab that is up).") -> Any:
    """The --lab option: checked as it is parsed, completed from the labs that are up."""
    return typer.Option(None, "--lab", help=help, metavar="NAME",
                        autocompletion=complete.lab_names, callback=_check_lab)


LabOption = lab_option()
NodeArgument = typer.Argument(..., metavar="NODE", help="Node name.",
                              autocompletion=complete.node_names)


def _check_mirror(value: str | None) -> str | None:
    """--mirror becomes an argument of mmdebstrap (root, hooks as options): a URL only."""
    from labctl.images.recipes import check_mirror

    return check_mirror(value)


MirrorOption = typer.Option(None, "--mirror", help="Debian mirror URL for image builds "
                            "(http, https or file; default: mmdebstrap's).", metavar="URL",
                            callback=_check_mirror)
TopologyArgument = typer.Argument(
    ..., metavar="TOPOLOGY", autocompletion=complete.topologies,
    help="Topology file (YAML), or the name of a shipped one (`labctl topologies`).",
)



def seconds(option: str) -> Callable[[float | None], float | None]:
    """A typer callback for a duration option: finite, above 0, at most a day (exit 2)."""

    def check(value: float | None) -> float | None:
        return None if value is None else check_seconds(option, value)

    return check


def int_range(flag: str, low: int, high: int) -> Callable[[int | None], int | None]:
    """A typer callback for a whole-number option bounded to low..high (exit 2)."""

    def check(value: int | None) -> int | None:
        if value is not None and not low <= value <= high:
            raise UsageError(f"{flag} must be a whole number from {low} to {high} (got {value})",
                             hint=f"e.g. {flag} {low}")
        return value

    return check


def run_value(option: str) -> Callable[[int | None], int | None]:
    """A typer callback for a run option (--size, --iters, --port...): checked as every
    caller of the runners checks it (labctl.runners.spec), as it is parsed (exit 2)."""

    def check(value: int | None) -> int | None:
        return None if value is None else check_options({option: value})[option]

    return check


_ELAPSED = re.compile(r"\(\d+ s\)")


@contextmanager
def progress_reporter(title: str) -> Iterator[Progress]:
    """A spinner on a terminal; on a pipe or log, one line per new step."""
    if err_console.is_terminal:
        with err_console.status(title) as status:
            yield lambda message: status.update(f"{title}: {message}")
        return
    last = [""]

    def report(message: str) -> None:
        key = _ELAPSED.sub("", message)
        if key != last[0]:
            last[0] = key
            print(f"{title}: {message}", file=sys.stderr, flush=True)

    yield report
