"""Reading capture files, with errors a user can act on."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from scapy.config import conf
from scapy.error import Scapy_Exception
from scapy.packet import Packet
from scapy.utils import EDecimal, PcapReader

from labctl.errors import UsageError

MAX_NOTES = 20  # what scapy says about a damaged file: the first few say it
# Records of no bytes are no packets: a run of them is a damaged file (a sparse file of
# zeros after a pcap header is one record every 16 bytes, and each one decoded took
# 0.6 ms: hours for a GiB). Skipped undecoded, and the file read no further after this many.
MAX_EMPTY_RECORDS = 1000


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
            yield from _packets(reader, quiet.notes)
    finally:
        scapy_log.removeFilter(quiet)


def _packets(reader: PcapReader, notes: list[str]) -> Iterator[Packet]:
    """The reader's packets, the empty records skipped (not dissected) and at most
    MAX_EMPTY_RECORDS of them in all."""
    empty = 0
    while True:
        try:
            data, meta = reader._read_packet()  # the raw record: cheap to look at
        except EOFError:
            if empty:
                notes.append(f"{empty} records hold no bytes (skipped)")
            return
        if not data:
            empty += 1
            if empty >= MAX_EMPTY_RECORDS:
                notes.append(f"{empty} records hold no bytes: the file was read no further")
                return
            continue
        yield _dissected(reader, data, meta)


def _dissected(reader: PcapReader, data: bytes, meta: Any) -> Packet:
    """What PcapReader.read_packet makes of a record: the link layer's packet (raw bytes
    when it does not dissect), with the record's time and wire length."""
    try:
        packet: Packet = reader.LLcls(data)
    except Exception:  # scapy's own fallback for a record its dissector refuses
        packet = conf.raw_layer(data)
    power = Decimal(10) ** Decimal(-9 if reader.nano else -6)
    packet.time = EDecimal(meta.sec + power * meta.usec)
    packet.wirelen = meta.wirelen
    return packet
