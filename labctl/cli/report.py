"""How every labctl command prints a failure: one function, one format.

    error: MESSAGE
    hint: WHAT TO DO

on stderr, the message and hint as plain text (a console's "[t=3]" or a topology's
"[node1:eth1]" is not markup)."""

from __future__ import annotations

from rich.markup import escape

from labctl.cli.common import err_console
from labctl.errors import LabctlError


def print_error(exc: LabctlError) -> None:
    err_console.print(f"[bold red]error:[/] {escape(exc.message)}", highlight=False)
    if exc.hint:
        err_console.print(f"[yellow]hint:[/] {escape(exc.hint)}", highlight=False)


def print_interrupted() -> None:
    err_console.print("[bold red]interrupted[/]; run `labctl down` to remove what was made")
