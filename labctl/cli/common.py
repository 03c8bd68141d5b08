"""Shared CLI pieces: consoles, progress reporting, the --lab option."""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import typer
from rich.console import Console

from labctl.bounded import printable
from labctl.cli import complete
from labctl.cli.safeprint import OutsideSafeConsole, outside_text
from labctl.errors import UsageError, short_repr
from labctl.progress import Progress
from labctl.runners.example_spec import check_options, check_seconds

# OutsideSafeConsole: what these print may quote a node or a file (labctl/cli/safeprint.py)
console = OutsideSafeConsole(highlight=False, width=None if Console().is_terminal else 120)
err_console = OutsideSafeConsole(stderr=True, highlight=False)

# Every command and group takes -h as well as --help (no command uses -h for anything else;
# click passes it down to subcommands too, but each group names it so a group alone shows it).
HELP_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}



def wants_terminal(command: list[str] | None) -> bool:
    """Whether `exec` asks the node for a terminal: only for a shell (no command) at a
    terminal. `labctl exec NODE < script` feeds the shell its input to the end, as
    `ssh NODE < script` does (dropbear hangs up a terminal session at its input's end)."""
    return not command and sys.stdin.isatty()


def _check_lab(value: str | None) -> str | None:
    """--lab is checked as it is parsed: "" is refused (never "the only lab"), and so is
    any text that is not a lab name (a path, "x\\n")."""
    if value is None:
        return None
    from labctl.lab.labs import check_lab_name  # keep startup lean

    return check_lab_name(value)


def lab_option(help: str = "Lab name (default: the only lab that is up).") -> Any:
    """The --lab option: checked as it is parsed, completed from the labs that are up."""
    return typer.Option(None, "--lab", help=help, metavar="NAME",
                        autocompletion=complete.lab_names, callback=_check_lab)


LabOption = lab_option()
NodeArgument = typer.Argument(..., metavar="NODE", help="Node name.",
                              autocompletion=complete.node_names)
# Host folders a topology may mount although they are the host's own (/etc, labctl's state):
# given on the command line, never in the file (labctl/topology/host.py).
AllowHostMountOption = typer.Option(
    None, "--allow-host-mount", metavar="DIR",
    help="Allow mounts of this host folder (and below) even if it is a system directory "
    "or labctl's own; repeatable.")


def _check_mirror(value: str | None) -> str | None:
    """--mirror becomes an argument of mmdebstrap (root, hooks as options): a URL only."""
    from labctl.data.recipes import check_mirror

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
    caller of the runners checks it (labctl.runners.example_spec), as it is parsed (exit 2)."""

    def check(value: int | None) -> int | None:
        return None if value is None else check_options({option: value})[option]

    return check


# --- paths a user gives -----------------------------------------------------------------------
PathKind = Literal["read", "write", "dir"]
_PATH_HINTS: dict[str, str] = {
    "read": "give the path of an existing file",
    "write": "give a file name in a directory that exists",
    "dir": "give a directory (it is made if it does not exist)",
}


def check_path(flag: str, value: str | Path, kind: PathKind) -> Path:
    """A path from the command line, checked against the OS before anything is done: a
    name too long (ENAMETOOLONG), a loop of links, a file where a directory must be, a
    NUL... is a UsageError (exit 2), never a traceback later, after minutes of work.

    `kind`: "read" (it may be missing: the command says what it expected), "write" (a
    file to make: its directory must exist) or "dir" (a directory, made if missing)."""
    path = Path(value)
    st = _stat(flag, path, kind)
    if st is not None:
        if kind == "write" and stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{flag} {short_repr(str(path))} is a directory",
                             hint=_PATH_HINTS[kind])
        if kind == "dir" and not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{flag} {short_repr(str(path))} is not a directory",
                             hint=_PATH_HINTS[kind])
    elif kind == "write":
        parent = _stat(flag, path.parent, kind)
        if parent is None or not stat.S_ISDIR(parent.st_mode):
            raise UsageError(f"{flag} {short_repr(str(path))}: no directory "
                             f"{short_repr(str(path.parent))}", hint=_PATH_HINTS[kind])
    return path


def _stat(flag: str, path: Path, kind: PathKind) -> os.stat_result | None:
    """os.stat(path), None when it does not exist, a UsageError for any other failure."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"{flag} {short_repr(str(path))}: {reason}",
                         hint=_PATH_HINTS[kind]) from None


def path_option(flag: str, kind: PathKind) -> Callable[[Any], Any]:
    """A typer callback checking a path option with check_path() as it is parsed."""

    def check(value: Any) -> Any:
        if value is None:
            return None
        checked = check_path(flag, value, kind)
        return checked if isinstance(value, Path) else str(checked)

    return check


_ELAPSED = re.compile(r"\(\d+ s\)")


@contextmanager
def progress_reporter(title: str) -> Iterator[Progress]:
    """A spinner on a terminal; on a pipe or log, one line per new step."""
    if err_console.is_terminal:
        with err_console.status(title) as status:
            # Text: a step's message can quote a guest's console ("[/]" is no markup)
            yield lambda message: status.update(outside_text(f"{title}: {message}"))
        return
    last = [""]

    def report(message: str) -> None:
        key = _ELAPSED.sub("", message)
        if key != last[0]:
            last[0] = key
            print(printable(f"{title}: {message}"), file=sys.stderr, flush=True)

    yield report
