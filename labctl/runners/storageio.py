"""The checked write and read both storage workloads (NVMe over Fabrics, NFS) make in the
client node, and the parser of what it prints.

The shell text here is constant: every value reaches it as a positional argument of
`sh -c SCRIPT sh ARG...`, never pasted in, so no value can change a script's shape.
"""

from __future__ import annotations

import re
from typing import Any

from labctl.bounded import parse_float, parse_int

# A prefix on every line the scripts print for the parser; the programs' own output (dd,
# nvme, mount) stays in the record between them, as data.
MARK = "labctl: "
PATTERN_FILE = "/dev/shm/labctl-storage.pattern"
READBACK_FILE = "/dev/shm/labctl-storage.readback"

# Shell functions the client scripts share. io TARGET MIB: write MIB MiB of random bytes to
# TARGET (a block device or a file on a mount) with O_DIRECT, read them back with O_DIRECT
# (the page cache would answer without the network otherwise), compare the SHA-256 sums.
# The times are the node's clock in ns around each dd (dd's own "MB/s" is kept as text).
IO_FUNCTIONS = r"""
export LC_ALL=C
note() { echo "labctl: $*"; }
kernel_log() { dmesg 2>/dev/null | tail -n 12 | sed 's/^/dmesg: /'; }
now() { date +%s%N; }
io() {
  rm -f "$PATTERN" "$READBACK"
  head -c "$(($2 * 1048576))" /dev/urandom > "$PATTERN" ||
    { note "failed: no pattern"; return 1; }
  want=$(sha256sum < "$PATTERN" | cut -c1-64)
  t0=$(now)
  dd if="$PATTERN" of="$1" bs=1M oflag=direct conv=fsync,notrunc 2>&1 ||
    { note "failed: write"; return 1; }
  t1=$(now)
  note "write bytes=$(($2 * 1048576)) ns=$((t1 - t0))"
  dd if="$1" of="$READBACK" bs=1M count="$2" iflag=direct 2>&1 || { note "failed: read"; return 1; }
  t2=$(now)
  note "read bytes=$(wc -c < "$READBACK") ns=$((t2 - t1))"
  got=$(sha256sum < "$READBACK" | cut -c1-64)
  rm -f "$PATTERN" "$READBACK"
  note "sha256 written=$want read=$got"
  if [ "$want" = "$got" ]; then note "verified yes"; else note "verified no"; return 1; fi
}
""".replace("$PATTERN", PATTERN_FILE).replace("$READBACK", READBACK_FILE)

# GNU dd's summary (LC_ALL=C in the script): "8388608 bytes (8.4 MB, 8.0 MiB) copied, 0.82 s,
# 10.2 MB/s"
_DD_LINE = re.compile(r"^(\d{1,15}) bytes .{0,60}copied, (\d{1,9}(?:\.\d{1,12})?) s, ")
_IO_LINE = re.compile(r"^labctl: (write|read) bytes=(\d{1,15}) ns=(\d{1,18})\s*$")
_SHA_LINE = re.compile(r"^labctl: sha256 written=([0-9a-f]{64}) read=([0-9a-f]{0,64})\s*$")
_VERIFIED = re.compile(r"^labctl: verified (yes|no)\s*$")
_FAILED = re.compile(r"^labctl: failed: (.{1,200})$")
_TRIES = re.compile(r"^labctl: (connect|mount) tries (\d{1,2})\s*$")
_DEVICE = re.compile(r"^labctl: (?:device|mounted) (\S{1,200})\s*$")


def megabytes_per_second(nbytes: int, ns: int) -> float | None:
    """MB/s (10^6 bytes, as dd says it) of `nbytes` in `ns`; None for a time of 0."""
    return round(nbytes / 1e6 / (ns / 1e9), 2) if ns > 0 else None


def parse_storage_io(output: str) -> dict[str, Any]:
    """The figures of a client's output: bytes written and read, MB/s each way, whether the
    read matched the write, the device or mount used, the tries the connect or mount took,
    the step that failed. Lines that do
    not match are data and ignored; the last match of each kind counts."""
    figures: dict[str, Any] = {}
    copied: tuple[int, float] | None = None  # dd's own count and time, before each note
    for line in output.splitlines()[:10000]:
        if m := _DD_LINE.match(line):
            copied = parse_int(m.group(1), "bytes copied"), parse_float(m.group(2), "seconds")
        elif m := _IO_LINE.match(line):
            way, nbytes, ns = (m.group(1), parse_int(m.group(2), "bytes"),
                               parse_int(m.group(3), "nanoseconds"))
            figures[f"{way}_bytes"] = nbytes
            figures[f"{way}_wall_seconds"] = round(ns / 1e9, 3)
            # dd's time is the transfer alone; the wall time adds dd's start (fork+exec
            # under TCG) and the open (an NFS OPEN, a round trip or more).
            if copied is not None and copied[0] == nbytes and copied[1] > 0:
                figures[f"{way}_seconds"] = copied[1]
                figures[f"{way}_mb_s"] = round(nbytes / 1e6 / copied[1], 2)
            else:
                figures[f"{way}_seconds"] = round(ns / 1e9, 3)
                figures[f"{way}_mb_s"] = megabytes_per_second(nbytes, ns)
            copied = None
        elif m := _SHA_LINE.match(line):
            figures["sha256"] = m.group(1)
        elif m := _VERIFIED.match(line):
            figures["verified"] = m.group(1) == "yes"
        elif m := _FAILED.match(line):
            figures["failed_step"] = m.group(1).strip()
        elif m := _TRIES.match(line):
            figures[f"{m.group(1)}_tries"] = parse_int(m.group(2), "tries")
        elif m := _DEVICE.match(line):
            figures["target"] = m.group(1)
    return figures
