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
    "topologies",
    "down",
    "status",
    "node",
    "exec_",
    "cp",
    "run",
    "bench",
    "image",
    "validate",
    "graph",
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
    add_completion=True,  # --install-completion / --show-completion (labctl/cli/complete.py)
    pretty_exceptions_enable=False,
)


def version() -> str:
    """labctl's version, from the installed package's metadata."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("labctl")
    except PackageNotFoundError:  # run from a tree that was never installed
        import labctl

        return f"{labctl.__version__} (not installed)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"labctl {version()}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version,
        help="Show labctl's version and exit.",
    ),
) -> None:
    """Software RDMA labs (Soft-RoCE / soft-iWARP) from a topology file."""


def _tidy_help() -> None:
    """Help shows a flag without a type and a value as its name (--mirror MIRROR), not
    typer's `<bool>`/`<str>`; an explicit metavar (--accel [auto|kvm|tcg]) is kept."""
    try:
        from typer.core import TyperArgument, TyperOption
    except ImportError:  # a typer without these classes prints its own style
        return
    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "labctl", False):
        return

    def display_type_rich(self: TyperOption, ctx: object) -> str | None:
        if self.metavar is not None:
            return str(self.metavar)
        if getattr(self, "is_flag", False) or getattr(self, "count", False):
            return None
        text = shown(self, ctx)
        if text and text.startswith("<") and text.rstrip(".").endswith(">"):
            many = "..." if text.endswith("...") else ""
            longs = [o for o in self.opts if o.startswith("--")]
            name = (longs[0][2:] if longs else self.name or "value").upper().replace("_", "-")
            return name + many
        return text

    display_type_rich.labctl = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]
    arg_shown = getattr(TyperArgument, "display_type_rich", None)
    if arg_shown is not None:
        TyperArgument.display_type_rich = lambda self, ctx: None  # type: ignore[method-assign]


_tidy_help()

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
