"""Reading capture files, with errors a user can act on."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

from scapy.error import Scapy_Exception
from scapy.packet import Packet
from scapy.utils import PcapReader

from labctl.errors import UsageError

MAX_NOTES = 20  # what scapy says about a damaged file: the first few say it


class _Notes(logging.Filter):
    """Keeps scapy's warnings about the file (a truncated packet, an unknown link type)
    for labctl to report in its own words, instead of scapy printing them."""

    def __init__(self, notes: list[str]) -> None:
        super().__init__()
        self.notes = notes

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if len(self.notes) < MAX_NOTES and text not in self.notes:
            self.notes.append(text)
        return False


def read_packets(path: Path, notes: list[str] | None = None) -> Iterator[Packet]:
    """The packets of a pcap, one at a time; what scapy warns about goes to `notes`."""
    if not path.is_file():
        raise UsageError(f"no capture file {path}", hint="give a pcap written by `labctl "
                         "capture -w` or `labctl run ... --capture`")
    scapy_log = logging.getLogger("scapy.runtime")
    quiet = _Notes(notes if notes is not None else [])
    scapy_log.addFilter(quiet)
    try:
        try:
            reader = PcapReader(str(path))
        except (Scapy_Exception, OSError, EOFError) as exc:
            raise UsageError(f"{path} is not a pcap file: {exc}",
                             hint="labctl reads pcap (not pcapng) files") from exc
        with reader:
            yield from reader
    finally:
        scapy_log.removeFilter(quiet)
