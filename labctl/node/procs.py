"""Processes found by their command line in /proc: what a lab left running (its qemu, its
ssh sessions) is found by the flags labctl gave it, since no pid file covers all of them."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path


def argv_of(pid: int | str) -> list[bytes] | None:
    """The command line of process `pid` (None if it is gone or not ours to read)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None


def has_option(argv: list[bytes], flag: bytes, matches: Callable[[bytes], bool]) -> bool:
    """True if `argv` has `flag` followed by a value that `matches` accepts."""
    return any(key == flag and matches(value) for key, value in itertools.pairwise(argv))


def pids_with_option(flag: bytes, matches: Callable[[bytes], bool],
                     program: bytes = b"") -> list[int]:
    """Sorted pids of the processes whose argv has `flag` followed by a value that `matches`
    accepts (and whose argv[0] ends with `program`, if given)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        argv = argv_of(proc.name)
        if argv and argv[0].endswith(program) and has_option(argv, flag, matches):
            found.append(int(proc.name))
    return sorted(found)
