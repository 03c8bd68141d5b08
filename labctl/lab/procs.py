"""Processes found by their command line in /proc: what a lab left running (its qemu, its
ssh sessions) is found by the flags labctl gave it, since no pid file covers all of them."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path


def pids_with_option(flag: bytes, matches: Callable[[bytes], bool],
                     program: bytes = b"") -> list[int]:
    """Sorted pids of the processes whose argv has `flag` followed by a value that `matches`
    accepts (and whose argv[0] ends with `program`, if given)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if not argv[0].endswith(program):
            continue
        if any(key == flag and matches(value) for key, value in itertools.pairwise(argv)):
            found.append(int(proc.name))
    return sorted(found)
