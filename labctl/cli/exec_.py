"""`labctl exec NODE -- CMD...`: run a command in a node, with its exit code."""

from __future__ import annotations

import os
import re

import typer

from labctl.cli.common import LabOption, NodeArgument
from labctl.errors import UsageError, short_repr
from labctl.lab.handle import open_lab
from labctl.topology.model import NODE_NAME_RE


def exec_command(
    node: str = NodeArgument,
    command: list[str] = typer.Argument(None, help="Command and arguments (after --).",
                                        metavar="COMMAND"),
    lab: str = LabOption,
) -> None:
    """Run COMMAND in NODE (an interactive shell when no command is given)."""
    if not re.fullmatch(NODE_NAME_RE, node):  # before the lab is opened; never echoed whole
        raise UsageError(f"bad node name {short_repr(node)}",
                         hint="node names are a lowercase letter then up to 14 of a-z, 0-9 "
                         "and '-'")
    handle = open_lab(lab)
    argv = handle.argv(node, command or [], tty=not command)
    os.execvp(argv[0], argv)  # the command's exit code becomes ours


def register(app: typer.Typer) -> None:
    app.command("exec")(exec_command)
