"""Locks every layer may take: a file lock that outlives what it guards."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from labctl import safefs


def _lock_file(path: Path) -> int:
    """The lock file at `path`, opened (made, with its folder, when missing). Lock files
    sit in a lab directory or the image cache: a link or FIFO planted there is replaced by
    a new lock file, never followed (labctl would create or hold the file it names)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
    return safefs.create(path, path.parent, 0o600, append=True, make_parents=False)


@contextlib.contextmanager
def blocking_lock(path: Path) -> Iterator[None]:
    """Wait for the exclusive lock at `path` (a file that outlives what it guards)."""
    fd = _lock_file(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def try_lock(path: Path) -> Iterator[bool]:
    """The exclusive lock at `path` if no one holds it: True inside when taken, False when
    another process holds it (nothing waits)."""
    fd = _lock_file(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
