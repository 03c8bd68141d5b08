"""`labctl --debug` (or LABCTL_DEBUG=1): every host command labctl starts, on stderr.

One place sees them all: Python's audit events. Every subprocess.run/Popen (qemu, ssh,
docker, tc, ip, mmdebstrap...) raises "subprocess.Popen", and `exec`'s hand-over to ssh
or docker raises "os.exec", whichever module starts it. An audit hook cannot be removed,
so it is installed once and does nothing unless debug output is on."""

from __future__ import annotations

import os
import shlex
import sys
import threading
from collections.abc import Sequence
from typing import Any

ENV = "LABCTL_DEBUG"
PREFIX = "debug: $ "
_state: dict[str, object] = {"on": False, "hooked": False}
_lock = threading.Lock()  # runs in parallel (exec --all, --pairs) print whole lines


def env_wants_debug() -> bool:
    """LABCTL_DEBUG set to anything but "", "0", "no" or "false"."""
    return os.environ.get(ENV, "").strip().lower() not in ("", "0", "no", "false")


def command_text(args: Any) -> str:
    """A command as a shell would take it back: shlex.join of its words (a string
    command, as Popen(shell=True) gets it, as it is)."""
    if isinstance(args, str | bytes | os.PathLike):
        return os.fsdecode(args)
    words: Sequence[Any] = args
    return shlex.join(os.fsdecode(w) for w in words)


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if not _state["on"] or event not in ("subprocess.Popen", "os.exec"):
        return
    # subprocess.Popen: (executable, args, cwd, env); os.exec: (path, args, env)
    try:
        text = command_text(args[1])
    except (TypeError, ValueError):  # never let the log stop the command
        text = repr(args[1])
    with _lock:
        if event == "os.exec":  # execvp tries each directory of PATH: say it once
            if _state.get("exec") == text:
                return
            _state["exec"] = text
        sys.stderr.write(PREFIX + text + "\n")
        sys.stderr.flush()


def enable(on: bool = True) -> None:
    """Print each host command from now on (on=False: stop)."""
    _state["on"] = on
    if on and not _state["hooked"]:
        sys.addaudithook(_hook)
        _state["hooked"] = True


def enabled() -> bool:
    return bool(_state["on"])
