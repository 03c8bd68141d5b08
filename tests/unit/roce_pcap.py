"""Write a large RoCE v2 pcap fast (struct, not scapy), for the memory tests of `capture -r`
and their measurement: `python -m tests.unit.roce_pcap OUT.pcap MEGABYTES`."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

PAYLOAD = 1024  # bytes of SEND data per frame: about 1.1 KB a frame
_PCAP_HEADER = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)  # Ethernet


def _frame(psn: int, ack: bool, payload: int = PAYLOAD) -> bytes:
    """Ethernet + IPv4 + UDP 4791 + BTH (+ AETH) + data + ICRC, node1 <-> node2."""
    opcode = 0x11 if ack else 0x04  # RC_ACKNOWLEDGE, RC_SEND_ONLY
    bth = struct.pack("!BBHII", opcode, 0, 0xFFFF, 0x11, (0x80000000 if not ack else 0) | psn)
    body = bth + (struct.pack("!I", psn) if ack else b"\x5a" * payload) + b"\0" * 4
    src, dst = (b"\x0a\x4d\x01\x02", b"\x0a\x4d\x01\x01") if ack else (
        b"\x0a\x4d\x01\x01", b"\x0a\x4d\x01\x02")
    udp = struct.pack("!HHHH", 49152, 4791, 8 + len(body), 0) + body
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0, src, dst)
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + udp


def write_pcap(path: Path, megabytes: float, payload: int = PAYLOAD) -> int:
    """A pcap of about `megabytes` MB of SEND/ACK pairs (`payload` bytes per SEND);
    returns the number of frames."""
    frames = 0
    with path.open("wb") as out:
        out.write(_PCAP_HEADER)
        size, target = len(_PCAP_HEADER), int(megabytes * 1e6)
        while size < target:
            data = _frame(frames // 2 & 0xFFFFFF, frames % 2 == 1, payload)
            record = struct.pack("<IIII", 1_700_000_000 + frames // 100_000,
                                 frames % 100_000 * 10, len(data), len(data)) + data
            out.write(record)
            size += len(record)
            frames += 1
    return frames


if __name__ == "__main__":
    print(write_pcap(Path(sys.argv[1]), float(sys.argv[2])), "frames")


def write_records(path: Path, frames: list[bytes]) -> None:
    """A pcap of the given Ethernet frames (one record each)."""
    with path.open("wb") as out:
        out.write(_PCAP_HEADER)
        for i, data in enumerate(frames):
            out.write(struct.pack("<IIII", 1_700_000_000, i, len(data), len(data)) + data)


def udp_frame(dport: int, body: bytes, proto: int = 17) -> bytes:
    """Ethernet + IPv4 + a UDP (or, proto 6, a bare TCP-numbered) datagram with `body`."""
    udp = struct.pack("!HHHH", 49152, dport, 8 + len(body), 0) + body
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, proto, 0,
                     b"\x0a\x4d\x01\x01", b"\x0a\x4d\x01\x02")
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + udp


def tcp_frame(sport: int, dport: int, seq: int, flags: int, body: bytes) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, flags, 65535, 0, 0) + body
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0x4000, 64, 6, 0,
                     b"\x0a\x4d\x01\x01", b"\x0a\x4d\x01\x02")
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + tcp
