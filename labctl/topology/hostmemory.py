"""How the memory a lab's qemu nodes ask for compares with what the host has free now.

The topology checks (checks.py) refuse a lab whose nodes need more memory than the host
has at all (exit 2). Memory in use by other programs and labs comes and goes, so a lab
that fits the host but not its free memory at this moment is only warned about: `up` may
still work once something else ends, or fail to start a node (qemu cannot allocate).
"""

from __future__ import annotations

from pathlib import Path

from labctl.capabilities import for_provider
from labctl.topology.resolved import Lab

MEMINFO = Path("/proc/meminfo")
_READ_LIMIT = 64 * 1024  # /proc/meminfo is ~1.5 KiB; never read more than this


def available_mib(meminfo: Path = MEMINFO) -> int | None:
    """MemAvailable from /proc/meminfo in MiB; None when it cannot be read or is absent."""
    try:
        with meminfo.open("rb") as stream:
            text = stream.read(_READ_LIMIT).decode("ascii", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key == "MemAvailable":
            fields = rest.split()
            if fields and fields[0].isdigit() and fields[1:2] == ["kB"]:
                return int(fields[0]) >> 10
            return None
    return None


def lab_memory_mib(lab: Lab) -> int:
    """The memory the lab's nodes ask for together (qemu gives each node all of it)."""
    return sum(node.memory_mib for node in lab.nodes)


def memory_warning(lab: Lab, available: int | None) -> str:
    """A warning when the qemu lab's nodes need more memory than the host has free now
    ("" when they fit, for other providers and when the free memory is unknown)."""
    # Only where a node's memory is its own (qemu): a container's is a ceiling.
    if not for_provider(lab.provider).own_memory or available is None:
        return ""
    total = lab_memory_mib(lab)
    if total <= available:
        return ""
    return (f"the nodes ask for {total} MiB of memory together; this host has {available} "
            f"MiB available now (MemAvailable): `up` may fail to start a node. Down other "
            f"labs, or give the nodes less memory")
