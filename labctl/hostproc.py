"""The one way labctl runs a short-lived program on this host (mount, qemu-img, ssh -O,
virsh, vagrant, ssh-keygen, a node's command over ssh...).

Every run has a timeout the caller chose (there is no default: a `mount -o loop` or an
`ssh -O check` that never returns must not hang labctl), reads what the program prints
bounded (a node's reply or a runaway tool cannot fill memory), and fails in one way: a
`HostProcessError`, a LabctlError (exit 1, a hint) whose message names the program and
ends with the last lines it wrote on stderr. The program not being installed, a timeout,
and (with check=True) a non-zero exit are such failures; with check=False a non-zero exit
is the caller's to read from the result.

Long-lived processes (qemu, capture readers, streamed build steps, pipelines) are started
with subprocess.Popen where they live; tests/unit/test_hostproc_only.py lists them, and
fails for any other way of starting a program outside this module. Code that runs on the
nodes or on the Docker host VM stays stdlib-only and does not use this module.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import IO

from labctl.bounded import NODE_REPLY_BYTES, printable
from labctl.errors import LabctlError

TIMED_OUT = 124  # the exit code a timed-out run reports (as timeout(1) does)
NOT_FOUND = 127  # the program is not installed (as a shell says)
TAIL_LINES = 20  # of the program's stderr, in a failure's message
TAIL_CHARS = 2000
COMMAND_CHARS = 200  # of a command line, in a message or hint


class Completed(subprocess.CompletedProcess[str]):
    """subprocess.CompletedProcess, and whether `limit` cut stdout or stderr."""

    def __init__(self, args: list[str], returncode: int, stdout: str, stderr: str,
                 truncated: bool = False) -> None:
        super().__init__(args, returncode, stdout, stderr)
        self.truncated = truncated


class HostProcessError(LabctlError):
    """A program labctl ran on this host failed: not found, timed out, or (when checked)
    a non-zero exit. `result` holds what it printed until then (exit 124 on a timeout,
    127 when not found), for the callers that carry on."""

    def __init__(self, message: str, hint: str, result: Completed, *, timed_out: bool = False,
                 missing: bool = False, reason: str = "") -> None:
        super().__init__(message, hint)
        self.result = result
        self.timed_out = timed_out
        self.missing = missing
        self.reason = reason  # the gist: "exit 3", "timed out after 5 s", "not found"


def command_line(argv: Sequence[str]) -> str:
    """`argv` as a shell would take it, cut for a message, control characters escaped."""
    text = shlex.join(argv)
    if len(text) > COMMAND_CHARS:
        text = text[:COMMAND_CHARS] + "…"
    return printable(text)


def tail(text: str, lines: int = TAIL_LINES, chars: int = TAIL_CHARS) -> str:
    """The last `lines` lines of `text`, at most `chars` characters, safe to print."""
    kept = "\n".join(text.strip().splitlines()[-lines:])
    if len(kept) > chars:
        kept = "…" + kept[-chars:]
    return printable(kept)


def run(argv: Sequence[str], *, timeout: float | None, check: bool = True,
        capture: bool = True, input: str | bytes | None = None,
        env: Mapping[str, str] | None = None, cwd: str | None = None,
        stderr: IO[bytes] | None = None, limit: int = NODE_REPLY_BYTES,
        what: str | None = None, hint: str | None = None,
        missing_hint: str | None = None) -> Completed:
    """Run `argv` to its end and return its exit code and output as text (bad bytes
    replaced), at most `limit` bytes of each stream kept (`truncated` says when more came).

    `timeout` in seconds is required: past it the program is killed and HostProcessError
    raised. None is only for a command of the user's own (`labctl exec`), whose length
    labctl cannot know. `check`: a non-zero exit raises too. `capture` False: stdout is
    thrown away. `stderr`: a file that takes the program's stderr instead of labctl
    (a log; a message then has no tail). `what` names the step in messages (default: the
    command line); `hint` is the error's hint, `missing_hint` the one for a program that
    is not installed. stdin is `input`, or nothing (never labctl's terminal)."""
    code, out, err, truncated = _run(argv, timeout=timeout, capture=capture, input=input,
                                     env=env, cwd=cwd, stderr=stderr, limit=limit,
                                     what=what, hint=hint, missing_hint=missing_hint)
    result = Completed(list(argv), code, _text(out), _text(err), truncated)
    if check and code != 0:
        raise _failed(argv, result, what, hint)
    return result


def run_bytes(argv: Sequence[str], *, timeout: float, check: bool = True,
              input: bytes | None = None, limit: int = NODE_REPLY_BYTES,
              what: str | None = None, hint: str | None = None,
              missing_hint: str | None = None) -> bytes:
    """run() for a program whose output is binary (zstd -d): its stdout as bytes, at most
    `limit` of them (HostProcessError when there were more: a cut binary is no use)."""
    code, out, err, truncated = _run(argv, timeout=timeout, capture=True, input=input,
                                     env=None, cwd=None, stderr=None, limit=limit,
                                     what=what, hint=hint, missing_hint=missing_hint)
    result = Completed(list(argv), code, "", _text(err), truncated)
    if check and code != 0:
        raise _failed(argv, result, what, hint)
    if truncated:
        raise HostProcessError(
            f"{what or _quoted(argv)} printed more than {limit} bytes",
            hint or f"run `{command_line(argv)}` by hand to see what it prints", result,
            reason=f"more than {limit} bytes")
    return out


def _quoted(argv: Sequence[str]) -> str:
    return f"`{command_line(argv)}`"


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _failed(argv: Sequence[str], result: Completed, what: str | None,
            hint: str | None) -> HostProcessError:
    said = tail(result.stderr) or tail(result.stdout)
    message = f"{what or _quoted(argv)} failed (exit {result.returncode})"
    return HostProcessError(
        message + (f": {said}" if said else ""),
        hint or f"run `{command_line(argv)}` by hand to see all it says", result,
        reason=f"exit {result.returncode}")


def _drain(stream: IO[bytes], limit: int, out: list[bytes], over: threading.Event) -> None:
    """Keep the first `limit` bytes of `stream`, read the rest away (the writer must
    never block on a full pipe), and flag `over` when there was more."""
    size = 0
    while chunk := stream.read(65536):
        if size < limit:
            out.append(chunk[: limit - size])
        size += len(chunk)
        if size > limit:
            over.set()


def _feed(stream: IO[bytes], data: bytes) -> None:
    try:
        stream.write(data)
        stream.close()
    except OSError:  # BrokenPipeError: the program exited without reading it all
        pass


def _run(argv: Sequence[str], *, timeout: float | None, capture: bool,
         input: str | bytes | None, env: Mapping[str, str] | None, cwd: str | None,
         stderr: IO[bytes] | None, limit: int, what: str | None, hint: str | None,
         missing_hint: str | None) -> tuple[int, bytes, bytes, bool]:
    argv = list(argv)
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
            stderr=stderr if stderr is not None else subprocess.PIPE,
            env=dict(env) if env is not None else None, cwd=cwd)
    except OSError as exc:
        tool = os.path.basename(argv[0]) if argv else "?"
        missing = isinstance(exc, FileNotFoundError) and not (cwd and not os.path.isdir(cwd))
        empty = Completed(argv, NOT_FOUND if missing else 126, "", exc.strerror or str(exc))
        if missing:
            raise HostProcessError(
                f"{tool} not found on this host (needed for {what or _quoted(argv)})",
                missing_hint or f"install {tool}, or put it on PATH; `labctl doctor` "
                "checks this host", empty, missing=True, reason="not found") from None
        raise HostProcessError(
            f"cannot run {what or _quoted(argv)}: {exc.strerror or exc}",
            hint or "`labctl doctor` checks this host", empty,
            reason=exc.strerror or str(exc)) from None
    outs: list[bytes] = []
    errs: list[bytes] = []
    over = threading.Event()
    readers = [threading.Thread(target=_drain, args=(pipe, limit, kept, over), daemon=True)
               for pipe, kept in ((proc.stdout, outs), (proc.stderr, errs))
               if pipe is not None]
    if input is not None and proc.stdin is not None:
        # written beside the wait: a program that never reads its stdin still times out
        readers.append(threading.Thread(
            target=_feed, args=(proc.stdin, input.encode() if isinstance(input, str) else input),
            daemon=True))
    for reader in readers:
        reader.start()
    timed_out = False
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.kill()
        code = proc.wait()
    except BaseException:  # Ctrl-C: the program does not outlive labctl's wait for it
        proc.kill()
        proc.wait()
        raise
    for reader in readers:
        reader.join(timeout=5)  # a grandchild may hold the pipe open: do not wait on it
    out, err = b"".join(outs), b"".join(errs)
    if timed_out:
        note = f"(timed out after {timeout} s)"  # as a node's failed command has said
        result = Completed(argv, TIMED_OUT, _text(out), _text(err) + "\n" + note,
                           over.is_set())
        said = tail(_text(err))
        raise HostProcessError(
            f"{what or _quoted(argv)} did not finish in {timeout:g} s"
            + (f"; its last words: {said}" if said else ""),
            hint or f"is this host very busy, or is the program stuck? run "
            f"`{command_line(argv)}` by hand to see", result, timed_out=True,
            reason=f"timed out after {timeout:g} s")
    return code, out, err, over.is_set()
