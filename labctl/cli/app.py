"""The `labctl` entry point: builds the typer app from one module per command."""

from __future__ import annotations

import importlib
import sys

import typer
from rich.console import Console
from rich.markup import escape

from labctl.errors import LabctlError

# Each module registers its command(s) on the app through `register(app)`.
COMMAND_MODULES = [
    "up",
    "down",
    "status",
    "exec_",
    "run",
    "bench",
    "image",
    "validate",
    "inspect",
    "link",
    "doctor",
    "docker_host",
    "capture",
]

app = typer.Typer(
    name="labctl",
    help="Software RDMA labs (Soft-RoCE / soft-iWARP) from a topology file.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _name in COMMAND_MODULES:
    try:
        _module = importlib.import_module(f"labctl.cli.{_name}")
    except ModuleNotFoundError as exc:  # a command still being written
        if exc.name != f"labctl.cli.{_name}":
            raise
        continue
    _module.register(app)

err_console = Console(stderr=True)


def main() -> None:
    try:
        app()
    except LabctlError as exc:
        # escape(): a message is text, "[node1:eth1, ...]" or a console's "[t=3]" no markup
        err_console.print(f"[bold red]error:[/] {escape(exc.message)}", highlight=False)
        if exc.hint:
            err_console.print(f"[yellow]hint:[/] {escape(exc.hint)}", highlight=False)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("[bold red]interrupted[/]; run `labctl down` to remove what was made")
        sys.exit(130)
    except SystemExit as exc:  # typer turns Ctrl-C into a silent exit 130 itself
        if exc.code == 130:
            err_console.print("[bold red]interrupted[/]; run `labctl down` to remove what was"
                              " made")
        raise
