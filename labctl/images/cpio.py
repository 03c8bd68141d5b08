"""A minimal writer for the cpio "newc" format, the one Linux unpacks as initramfs."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

_TRAILER = "TRAILER!!!"


def _header(name: bytes, mode: int, size: int, ino: int, mtime: int = 0) -> bytes:
    fields = [ino, mode, 0, 0, 1, mtime, size, 0, 0, 0, 0, len(name) + 1, 0]
    return b"070701" + b"".join(f"{value:08x}".encode() for value in fields)


def _pad(length: int) -> bytes:
    return b"\0" * (-length % 4)


class CpioWriter:
    """Collects entries (directories, files, symlinks) and renders one archive."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._ino = 1
        self._dirs: set[str] = set()

    def _parents(self, name: str) -> None:
        """The kernel does not create missing parent directories: add them first."""
        parts = name.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            self.directory("/".join(parts[:depth]))

    def _entry(self, name: str, mode: int, data: bytes = b"") -> None:
        name = name.strip("/")
        if name != _TRAILER:
            self._parents(name)
        raw = name.encode()
        head = _header(raw, mode, len(data), self._ino)
        self._ino += 1
        self._parts += [head, raw, b"\0", _pad(len(head) + len(raw) + 1), data, _pad(len(data))]

    def directory(self, name: str, mode: int = 0o755) -> None:
        name = name.strip("/")
        if name in self._dirs or name in ("", "."):
            return
        self._dirs.add(name)
        self._entry(name, stat.S_IFDIR | mode)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self._entry(name, stat.S_IFREG | mode, data)

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def tree(self, source: Path, prefix: str, skip: Iterable[str] = ()) -> None:
        """Add `source` recursively under `prefix`, skipping names in `skip`."""
        skipped = set(skip)
        self.directory(prefix)
        for root, dirs, files in os.walk(source):
            dirs[:] = sorted(d for d in dirs if d not in skipped)
            rel = Path(root).relative_to(source)
            for d in dirs:
                self.directory(f"{prefix}/{(rel / d).as_posix()}")
            for f in sorted(files):
                if f in skipped or f.endswith(".pyc"):
                    continue
                path = Path(root) / f
                mode = path.stat().st_mode & 0o777
                self.file(f"{prefix}/{(rel / f).as_posix()}", path.read_bytes(), mode)

    def render(self) -> bytes:
        self._entry(_TRAILER, 0)
        data = b"".join(self._parts)
        return data + b"\0" * (-len(data) % 512)


def read_entries(data: bytes) -> list[tuple[str, int, bytes]]:
    """(name, mode, data) of each entry of a newc archive up to its trailer, as CpioWriter
    writes them (a symlink's data is its target). ValueError if `data` is not one."""
    entries: list[tuple[str, int, bytes]] = []
    offset = 0
    while True:
        head = data[offset:offset + 110]
        if len(head) < 110 or head[:6] != b"070701":
            raise ValueError(f"no cpio newc header at offset {offset}")
        fields = [int(head[6 + 8 * i:14 + 8 * i], 16) for i in range(13)]
        mode, size, name_size = fields[1], fields[6], fields[11]
        name_end = offset + 110 + name_size
        name = data[offset + 110:name_end - 1].decode()
        body = name_end + (-name_end % 4)
        if name == _TRAILER:
            return entries
        if body + size > len(data):
            raise ValueError(f"cpio entry {name!r} runs past the archive's end")
        entries.append((name, mode, data[body:body + size]))
        offset = body + size + (-(body + size) % 4)
