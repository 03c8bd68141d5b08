"""The `labctl` entry point: builds the typer app from one module per command."""

from __future__ import annotations

import importlib
import inspect
import sys
from typing import Any

import typer
import typer.main

from labctl.cli.common import HELP_SETTINGS
from labctl.cli.report import on_interrupt, print_error, print_interrupted
from labctl.errors import LabctlError, UsageError

# Each module registers its command(s) on the app through `register(app)`.
COMMAND_MODULES = [
    "up",
    "topologies",
    "down",
    "status",
    "node",
    "exec_",
    "logs",
    "cp",
    "run",
    "run_workloads",
    "bench",
    "image",
    "kernel",
    "matrix",
    "validate",
    "graph",
    "inspect",
    "link",
    "doctor",
    "docker_host",
    "capture",
    "fault",
    "version",
    "lesson",
    "lesson_grade",
]

app = typer.Typer(
    name="labctl",
    help="Software RDMA labs (Soft-RoCE / soft-iWARP) from a topology file.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (labctl/cli/complete.py)
    pretty_exceptions_enable=False,
    context_settings=HELP_SETTINGS,
)


def version() -> str:
    """labctl's version, from the installed package's metadata."""
    from labctl.cli.version import labctl_version

    return labctl_version()


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
    debug: bool = typer.Option(
        False, "--debug", help="Print each host command labctl runs (qemu, ssh, docker, "
        "tc...) to stderr; also LABCTL_DEBUG=1.",
    ),
) -> None:
    """Software RDMA labs (Soft-RoCE / soft-iWARP) from a topology file."""
    from labctl.cli import debug as debug_output

    if debug or debug_output.env_wants_debug():
        debug_output.enable()


def _metavars_whole() -> None:
    """A value's metavar is never folded (`first|adjacent|all|A:B,C:D` cut after `A:B,C:`):
    typer's options table lets rich shrink its widest columns together, the metavars' with
    the help's; marked no_wrap, the metavar column keeps its width and the help column (of
    words, which wrap between words) gives way. typer's tables put the metavar column just
    before the help (the commands table's name column there is no_wrap already)."""
    try:
        from typer import rich_utils
    except ImportError:  # typer without rich: click's plain help
        return
    table = getattr(rich_utils, "Table", None)
    if table is None or getattr(table, "labctl", False):
        return

    class HelpTable(table):  # type: ignore[misc,valid-type]
        labctl = True

        def add_row(self, *renderables: Any, **kwargs: Any) -> None:
            super().add_row(*renderables, **kwargs)
            if len(self.columns) >= 2:
                self.columns[-2].no_wrap = True

    rich_utils.Table = HelpTable  # type: ignore[misc]


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
    usage_name = getattr(TyperArgument, "_usage_display_name", None)
    if usage_name is not None:  # a required argument as README writes it: SRC, not {SRC}
        def plain_usage_name(self: TyperArgument) -> str:
            name = str(usage_name(self))
            return name[1:].replace("}", "", 1) if name.startswith("{") else name

        TyperArgument._usage_display_name = plain_usage_name  # type: ignore[method-assign]


_tidy_help()
_metavars_whole()

# A module that fails to import is a bug to see at once, never a command that silently
# disappears from `labctl --help`.
for _name in COMMAND_MODULES:
    importlib.import_module(f"labctl.cli.{_name}").register(app)


# click's exception classes, found through typer's public BadParameter: typer >= 0.20 ships
# its own copy of click (typer._click), older ones use click itself.
_CLICK_CLASSES = {cls.__name__: cls for cls in typer.BadParameter.__mro__}
CLICK_USAGE_ERROR: type[Exception] = _CLICK_CLASSES["UsageError"]
CLICK_EXCEPTION: type[Exception] = _CLICK_CLASSES["ClickException"]
MESSAGE_LIMIT = 300  # click echoes the bad value in its message: a hostile one is cut


def one_line(text: str) -> str:
    """A docstring paragraph as one line: typer's rich help keeps a docstring's single
    newlines, which break its sentences mid-line ("addresses and / RDMA devices")."""
    return " ".join(text.split())


def tidy_help_text(command: Any) -> None:
    """Every command's help with each paragraph on one line (its group lists the first);
    a paragraph that starts with \\b keeps its lines, as click documents. Recurses."""
    if command.help:
        paragraphs = inspect.cleandoc(command.help).split("\n\n")
        command.help = "\n\n".join(p if p.startswith("\b") else one_line(p)
                                    for p in paragraphs)
    if command.short_help:
        command.short_help = one_line(command.short_help)
    for sub in getattr(command, "commands", {}).values():
        tidy_help_text(sub)


def lowercase_first(message: str) -> str:
    """click's "No such option: --x" in labctl's voice, "no such option: --x"; a first word
    that is a name or an acronym (RDMA, NODE, IPv4) stays as it is."""
    word = message.split(" ", 1)[0]
    if len(word) > 1 and word[0].isupper() and word[1:].isalpha() and word[1:].islower():
        return message[0].lower() + message[1:]
    return message


def usage_error(exc: Exception) -> UsageError:
    """A click usage error (bad value, unknown option or command, missing argument) as
    labctl's own: `error: MESSAGE` and a hint with the usage line and where help is."""
    formatted = getattr(exc, "format_message", None)
    message = formatted() if callable(formatted) else str(exc)
    message = lowercase_first(one_line(str(message)))
    if len(message) > MESSAGE_LIMIT:
        message = message[:MESSAGE_LIMIT] + "…"
    ctx = getattr(exc, "ctx", None)
    if ctx is None:
        return UsageError(message, hint="see `labctl -h`")
    usage = one_line(ctx.get_usage().removeprefix("Usage:"))
    return UsageError(message, hint=f"usage: {usage}; see `{ctx.command_path} -h`")


def typed_command(words: list[str]) -> str:
    """The command the user typed, `labctl run pingpong`, from the words given."""
    command, path = cli_command(), ["labctl"]
    for word in words:
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            break
        command = sub
        path.append(word)
    return " ".join(path)


def cli_command() -> Any:
    """The click command tree of the app, its help text tidied."""
    command = typer.main.get_command(app)
    tidy_help_text(command)
    return command


def main() -> None:
    # standalone_mode=False: click raises its errors to us instead of printing its boxed
    # form, and returns the code of a typer.Exit (help, --version, a command's exit).
    on_interrupt("")  # read-only until a command says what an interrupt would leave
    try:
        # prog_name: usage lines and the completion variable (_LABCTL_COMPLETE) are labctl's
        # however it was started (python -m labctl, the script, a test)
        code = cli_command().main(prog_name="labctl", standalone_mode=False)
    except LabctlError as exc:
        if isinstance(exc, UsageError) and not exc.hint:  # every usage error has a hint
            exc.hint = f"see `{typed_command(sys.argv[1:])} -h`"
        print_error(exc)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print_interrupted()
        sys.exit(130)
    except CLICK_USAGE_ERROR as exc:
        # `labctl` or a group alone: typer has printed the help already
        if type(exc).__name__ != "NoArgsIsHelpError":
            print_error(usage_error(exc))
        sys.exit(2)
    except CLICK_EXCEPTION as exc:  # e.g. a file option that cannot be opened
        error = usage_error(exc)
        print_error(LabctlError(error.message))
        sys.exit(getattr(exc, "exit_code", 1))
    except typer.Abort:
        print_error(LabctlError("aborted"))
        sys.exit(1)
    except SystemExit as exc:  # typer turns Ctrl-C into a silent exit 130 itself
        if exc.code == 130:
            print_interrupted()
        raise
    if isinstance(code, int) and not isinstance(code, bool):
        if code == 130:  # typer turns Ctrl-C into Exit(130)
            print_interrupted()
        sys.exit(code)
