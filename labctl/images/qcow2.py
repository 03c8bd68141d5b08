"""What a qcow2 file makes qemu open besides itself: its backing file and external data file.

A qcow2 overlay names other files in its header (qemu's docs/interop/qcow2.txt): a backing
file qemu reads the guest's disk from, and, with the "external data file" feature, a file
the guest's writes land in. A saved machine's disk.qcow2 from a cache labctl did not fill
may name any host file there, so the header is read here (a few KiB, bounded, no qemu-img)
and the disk used only if it names exactly the backing file labctl gave it.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

MAGIC = b"QFI\xfb"
HEADER_BYTES = 64 << 10  # the header and its extensions: within the first cluster
_EXTERNAL_DATA_FILE_BIT = 1 << 2  # incompatible feature bit 2
_KNOWN_INCOMPATIBLE = 0b11111  # dirty, corrupt, data file, compression type, extended L2
_EXT_END = 0
_EXT_BACKING_FORMAT = 0xE2792ACA
_EXT_DATA_FILE = 0x44415441


class NotOurQcow2(ValueError):
    """The file is not a qcow2 whose only outside file is the one expected; str() says why."""


@dataclass(frozen=True)
class Qcow2Header:
    version: int
    backing_file: str | None
    backing_format: str | None
    external_data_file: bool  # the feature bit or a data file name extension


def read_header(fd: int) -> Qcow2Header:
    """The header of the qcow2 open at `fd` (read from offset 0, at most HEADER_BYTES)."""
    data = os.pread(fd, HEADER_BYTES, 0)
    if len(data) < 72 or data[:4] != MAGIC:
        raise NotOurQcow2("not a qcow2 file")
    version, backing_offset, backing_size = struct.unpack_from(">IQI", data, 4)
    if version not in (2, 3):
        raise NotOurQcow2(f"qcow2 version {version}")
    incompatible, header_length = 0, 72
    if version == 3:
        if len(data) < 104:
            raise NotOurQcow2("a cut qcow2 header")
        (incompatible,) = struct.unpack_from(">Q", data, 72)
        (header_length,) = struct.unpack_from(">I", data, 100)
        if header_length < 104 or header_length > len(data):
            raise NotOurQcow2(f"a qcow2 header length of {header_length}")
    if incompatible & ~_KNOWN_INCOMPATIBLE:
        raise NotOurQcow2(f"unknown qcow2 incompatible features {incompatible:#x}")
    backing: str | None = None
    if backing_offset or backing_size:
        if backing_size > 1023 or backing_offset + backing_size > len(data):
            raise NotOurQcow2("a backing file name outside its header")
        backing = data[backing_offset:backing_offset + backing_size].decode(
            errors="surrogateescape")
    backing_format, data_file = _extensions(data, header_length)
    return Qcow2Header(version, backing, backing_format,
                       bool(incompatible & _EXTERNAL_DATA_FILE_BIT) or data_file)


def _extensions(data: bytes, offset: int) -> tuple[str | None, bool]:
    """The backing format name and whether a data file is named, from the header's
    extensions (each: type, length, data padded to 8 bytes; type 0 ends them)."""
    backing_format, data_file = None, False
    while True:
        if offset + 8 > len(data):
            raise NotOurQcow2("qcow2 header extensions without their end")
        kind, length = struct.unpack_from(">II", data, offset)
        if kind == _EXT_END:
            return backing_format, data_file
        body = data[offset + 8:offset + 8 + length]
        if len(body) < length:
            raise NotOurQcow2("a qcow2 header extension past the header")
        if kind == _EXT_BACKING_FORMAT:
            backing_format = body.decode(errors="replace")
        elif kind == _EXT_DATA_FILE:
            data_file = True
        offset += 8 + (length + 7) // 8 * 8


def check_overlay(fd: int, backing_file: str, backing_format: str = "raw") -> None:
    """NotOurQcow2 unless the qcow2 at `fd` is an overlay of exactly `backing_file` (in
    `backing_format`) with no external data file: all qemu will open with it."""
    header = read_header(fd)
    if header.external_data_file:
        raise NotOurQcow2("it names an external data file (guest writes would land there)")
    if header.backing_file != backing_file:
        raise NotOurQcow2(f"its backing file is {header.backing_file!r}, not {backing_file!r}")
    if header.backing_format != backing_format:
        raise NotOurQcow2(f"its backing file's format is {header.backing_format!r}, not "
                          f"{backing_format!r}")
