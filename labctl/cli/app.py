"""The `labctl` entry point: builds the typer app from one module per command."""

from __future__ import annotations

import importlib
import sys

import typer

from labctl.cli.report import print_error, print_interrupted
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
]

app = typer.Typer(
    name="labctl",
    help="Software RDMA labs (Soft-RoCE / soft-iWARP) from a topology file.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# A module that fails to import is a bug to see at once, never a command that silently
# disappears from `labctl --help`.
for _name in COMMAND_MODULES:
    importlib.import_module(f"labctl.cli.{_name}").register(app)


def main() -> None:
    try:
        app()
    except LabctlError as exc:
        print_error(exc)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print_interrupted()
        sys.exit(130)
    except SystemExit as exc:  # typer turns Ctrl-C into a silent exit 130 itself
        if exc.code == 130:
            print_interrupted()
        raise
