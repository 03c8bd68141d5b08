"""`labctl logs NODE [--follow] [--lines N]`: a node's console log (qemu, Vagrant with labctl's
box) or its container's log (Docker), its last lines and, with -f, what follows."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from pathlib import Path

import typer

from labctl import bounded, hostproc
from labctl.cli import complete
from labctl.cli.capture import terminate_as_interrupt
from labctl.cli.common import LabOption, int_range
from labctl.errors import LabctlError, UsageError, short_repr
from labctl.lab.handle import LabHandle, open_lab
from labctl.topology.lookup import require_node
from labctl.topology.model import NODE_NAME_RE

DEFAULT_LINES = 50
MAX_LINES = 100_000
TAIL_BYTES = 8 << 20  # what is read of a console log's end for its last lines
LINE_BYTES = 64 << 10  # a longer line (no newline for 64 KiB) is printed in pieces
POLL_SECONDS = 0.5  # -f: how often the file is looked at again
# What a guest prints is data: escapes (colours, cursor moves, a terminal's title) and
# other control characters are shown as text, never sent to the user's terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(line: str) -> str:
    """A log line with its carriage returns dropped and other controls shown as \\xNN."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", line.replace("\r", ""))


def _write(lines: list[str]) -> None:
    if lines:
        sys.stdout.write("".join(printable(line) + "\n" for line in lines))
        sys.stdout.flush()


def last_lines(path: Path, count: int) -> tuple[list[str], bounded.FileMark]:
    """The last `count` lines of a console log, from at most TAIL_BYTES of its end, and
    the mark where they end (what -f prints next: nothing lost or printed twice)."""
    _, (inode, size) = bounded.read_since(path, None)
    start = max(0, size - TAIL_BYTES)
    data, mark = bounded.read_since(path, (inode, start), size - start)
    if start and mark[1] > start:  # drop the partial first line
        data = data.partition(b"\n")[2]
    return data.decode("utf-8", errors="replace").splitlines()[-count:], mark


def follow_file(path: Path, mark: bounded.FileMark, poll: float = POLL_SECONDS) -> None:
    """Print each whole line the file gains after `mark` until Ctrl-C (or the file and
    its node are gone: the lab was taken down)."""
    pending = b""
    while True:
        try:
            data, mark = bounded.read_since(path, mark, LINE_BYTES)
        except FileNotFoundError:
            if not path.parent.exists():
                _write([pending.decode("utf-8", errors="replace")] if pending else [])
                print("note: the node's directory is gone (lab removed)", file=sys.stderr)
                return
            data = b""  # a node restarting: its new console log is not made yet
        pending += data
        *complete_lines, pending = pending.split(b"\n")
        if len(pending) >= LINE_BYTES:  # never hold more than a line's bound
            complete_lines.append(pending)
            pending = b""
        _write([line.decode("utf-8", errors="replace") for line in complete_lines])
        if len(data) < LINE_BYTES:  # caught up: wait for more
            time.sleep(poll)


def _console(handle: LabHandle, node: str, path: Path, lines: int, follow: bool) -> None:
    try:
        shown, mark = last_lines(path, lines)
        _write(shown)
        if follow:
            follow_file(path, mark)
    except FileNotFoundError:
        raise LabctlError(f"node {node} has no console log yet ({path})",
                          hint="it is made as the node boots; see `labctl status`") from None
    except bounded.BoundedError as exc:
        raise LabctlError(f"cannot read node {node}'s console log: {exc}",
                          hint=f"`labctl down --lab {handle.lab.name}` removes the lab") from None


def _command(node: str, argv: list[str], follow: bool) -> None:
    """Run the provider's log command (docker logs), its lines printed as text."""
    if not follow:
        result = hostproc.run(argv, timeout=60, limit=TAIL_BYTES, check=False,
                              what=f"reading node {node}'s log", hint="`labctl doctor` "
                              "checks this host; is the node running (`labctl status`)?")
        if result.returncode != 0:
            raise LabctlError(f"cannot read node {node}'s log: {result.stderr.strip()[-300:]}",
                              hint="see `labctl status`; is the node running?")
        # a container's log is its stdout and its stderr: both are the log
        _write((result.stdout + result.stderr).splitlines())
        return
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
    except OSError as exc:
        raise LabctlError(f"cannot read node {node}'s log: {argv[0]}: {exc.strerror}",
                          hint="`labctl doctor` checks this host") from None
    assert proc.stdout is not None
    try:
        while line := proc.stdout.readline(LINE_BYTES):
            _write([line.rstrip(b"\n").decode("utf-8", errors="replace")])
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait()
    if proc.returncode not in (0, -15):
        raise LabctlError(f"the log of node {node} ended: {argv[0]} exited {proc.returncode}",
                          hint="see `labctl status`; is the node running?")


def logs(
    node: str = typer.Argument(..., metavar="NODE", help="Node name.",
                               autocompletion=complete.node_names),
    # no -f or -n: they are --filter and --iters elsewhere (one meaning per short flag)
    follow: bool = typer.Option(False, "--follow", help="Go on printing what the "
                                "node logs, until Ctrl-C."),
    lines: int = typer.Option(DEFAULT_LINES, "--lines", metavar="COUNT",
                              help=f"Print the last COUNT lines (1 to {MAX_LINES}).",
                              callback=int_range("--lines", 1, MAX_LINES)),
    lab: str = LabOption,
) -> None:
    """Print a node's console log (qemu; Vagrant with labctl's box) or its container's log
    (Docker): its boot, kernel messages, what its init printed."""
    if not re.fullmatch(NODE_NAME_RE, node):  # before the lab is opened; never echoed whole
        raise UsageError(f"bad node name {short_repr(node)}",
                         hint="node names are a lowercase letter then up to 14 of a-z, 0-9 "
                         "and '-'")
    handle = open_lab(lab)
    require_node(handle.lab, node)
    # SIGTERM/SIGHUP end -f as Ctrl-C does; SIGINT too (a shell's background job has it
    # ignored), so `labctl logs NODE --follow &` stops at `kill -INT`.
    with terminate_as_interrupt() if follow else contextlib.nullcontext():
        _show(handle, node, lines, follow)


def _show(handle: LabHandle, node: str, lines: int, follow: bool) -> None:
    try:
        path = handle.provider.console_log(node)
        argv = None if path else handle.provider.log_argv(node, lines=lines, follow=follow)
        if path is not None:
            _console(handle, node, path, lines, follow)
        elif argv is not None:
            _command(node, argv, follow)
        else:
            raise UsageError(f"lab {handle.lab.name} keeps no console log for node {node} "
                             f"({handle.provider.capabilities.kind} lab)",
                             hint=f"`labctl exec {node} -- journalctl -b --no-pager -n {lines}` "
                             "shows its system log")
    except KeyboardInterrupt:  # the end of -f: nothing was changed, nothing to say
        raise typer.Exit(0) from None


def register(app: typer.Typer) -> None:
    app.command("logs")(logs)
