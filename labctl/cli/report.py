"""How every labctl command prints a failure: one function, one format.

    error: MESSAGE
    hint: WHAT TO DO

on stderr, the message and hint as plain text (a console's "[t=3]" or a topology's
"[node1:eth1]" is not markup)."""

from __future__ import annotations

from collections.abc import Callable

from rich.markup import escape

from labctl.cli.common import err_console
from labctl.errors import LabctlError


def print_error(exc: LabctlError) -> None:
    # Piped or logged, a message is one line however long (a reader greps it); at a
    # terminal the console folds it to the window.
    wrap = err_console.is_terminal
    err_console.print(f"[bold red]error:[/] {escape(exc.message)}", highlight=False,
                      soft_wrap=not wrap)
    if exc.hint:
        err_console.print(f"[yellow]hint:[/] {escape(exc.hint)}", highlight=False,
                          soft_wrap=not wrap)


# What Ctrl-C leaves, said after "interrupted": a command that changes something says it
# (on_interrupt) as soon as it knows; a read-only command says nothing, as there is nothing.
_interrupt_note: list[Callable[[], str]] = []


def on_interrupt(note: str | Callable[[], str]) -> None:
    """What to say if the command is interrupted from now on: a sentence, or a function
    that makes it when it is needed (what exists then)."""
    _interrupt_note[:] = [note if callable(note) else (lambda: note)]


def interrupted_message() -> str:
    """`interrupted`, and what the command left and how to clean only that, if anything."""
    note = _interrupt_note[0]() if _interrupt_note else ""
    return "interrupted" + (f"; {note}" if note else "")


def print_interrupted() -> None:
    first, sep, rest = interrupted_message().partition(";")
    err_console.print(f"[bold red]{first}[/]{escape(sep + rest)}", highlight=False,
                      soft_wrap=not err_console.is_terminal)
