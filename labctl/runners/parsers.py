"""Parsers for the example programs' text output (unit-tested on captured runs)."""

from __future__ import annotations

import re
from typing import Any

_BYTES = re.compile(r"^(\d+) bytes in ([\d.]+) seconds = ([\d.]+) Mbit/sec$", re.M)
_ITERS = re.compile(r"^(\d+) iters in ([\d.]+) seconds = ([\d.]+) usec/iter$", re.M)


def parse_pingpong(output: str) -> dict[str, Any]:
    """ibv_{rc,uc,ud,srq}_pingpong: the closing two lines."""
    figures: dict[str, Any] = {}
    bytes_match = _BYTES.search(output)
    iters_match = _ITERS.search(output)
    if bytes_match:
        figures["bytes"] = int(bytes_match.group(1))
        figures["seconds"] = float(bytes_match.group(2))
        figures["mbit_per_sec"] = float(bytes_match.group(3))
    if iters_match:
        figures["iters"] = int(iters_match.group(1))
        figures["usec_per_iter"] = float(iters_match.group(3))
    return figures
