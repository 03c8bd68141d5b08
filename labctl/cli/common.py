"""Shared CLI pieces: consoles, progress reporting, the --lab option."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.console import Console

from labctl.cli import complete
from labctl.providers.base import Progress

console = Console(highlight=False, width=None if Console().is_terminal else 120)
err_console = Console(stderr=True, highlight=False)

LabOption = typer.Option(None, "--lab", help="Lab name (default: the only lab that is up).",
                         metavar="NAME", autocompletion=complete.lab_names)
NodeArgument = typer.Argument(..., metavar="NODE", help="Node name.",
                              autocompletion=complete.node_names)
TopologyArgument = typer.Argument(
    ..., metavar="TOPOLOGY", autocompletion=complete.topologies,
    help="Topology file (YAML), or the name of a shipped one (`labctl topologies`).",
)

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
