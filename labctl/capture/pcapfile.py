"""Reading capture files, with errors a user can act on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from scapy.error import Scapy_Exception
from scapy.packet import Packet
from scapy.utils import PcapReader

from labctl.errors import UsageError


def read_packets(path: Path) -> Iterator[Packet]:
    if not path.is_file():
        raise UsageError(f"no capture file {path}", hint="give a pcap written by `labctl "
                         "capture -w` or `labctl run ... --capture`")
    try:
        reader = PcapReader(str(path))
    except (Scapy_Exception, OSError, EOFError) as exc:
        raise UsageError(f"{path} is not a pcap file: {exc}",
                         hint="labctl reads pcap (not pcapng) files") from exc
    with reader:
        yield from reader
