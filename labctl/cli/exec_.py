"""`labctl exec NODE -- CMD...`: run a command in a node, with its exit code."""

from __future__ import annotations

import os

import typer

from labctl.cli.common import LabOption, NodeArgument
from labctl.lab.handle import open_lab


def exec_command(
    node: str = NodeArgument,
    command: list[str] = typer.Argument(None, help="Command and arguments (after --).",
                                        metavar="COMMAND"),
    lab: str = LabOption,
) -> None:
    """Run COMMAND in NODE (an interactive shell when no command is given)."""
    handle = open_lab(lab)
    argv = handle.argv(node, command or [], tty=not command)
    os.execvp(argv[0], argv)  # the command's exit code becomes ours


def register(app: typer.Typer) -> None:
    app.command("exec")(exec_command)
