"""iWARP over TCP (siw): MPA request/reply frames, then MPA FPDUs carrying DDP/RDMAP.

Formats from RFC 5044 (MPA: the 16-byte keys, flags M/C/R, ULPDU_Length, padding to 4
bytes, then the 4-byte CRC field, which is always there and zero unless CRC was agreed),
RFC 6581 (MPA revision 2: the Enhanced flag, IRD/ORD in the private data), RFC 5041
(DDP: control byte T/L/DV, tagged STag/TO, untagged QN/MSN/MO) and RFC 5040 (RDMAP:
control byte RV/opcode; Read Request fields).
The byte stream of each direction is reassembled in order; a gap (a segment the capture
missed), MPA markers, or anything that does not parse ends decoding of that direction
honestly ("not decoded") instead of guessing.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

MPA_REQ_KEY = b"MPA ID Req Frame"
MPA_REP_KEY = b"MPA ID Rep Frame"
_MPA_FLAG_MARKERS, _MPA_FLAG_CRC, _MPA_FLAG_REJECT, _MPA_FLAG_ENHANCED = 0x80, 0x40, 0x20, 0x10
_MPA_CRC_LEN = 4
RDMAP_OPCODES = {0: "RDMA_WRITE", 1: "RDMA_READ_REQUEST", 2: "RDMA_READ_RESPONSE", 3: "SEND",
                 4: "SEND_INVALIDATE", 5: "SEND_SE", 6: "SEND_SE_INVALIDATE", 7: "TERMINATE"}
_MPA_FRAME_MIN = 20


@dataclass
class IwarpMessage:
    name: str  # MPA_REQUEST, MPA_REPLY, RDMA_WRITE, SEND, ...
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Direction:
    next_seq: int | None = None
    buffer: bytes = b""
    state: str = "start"  # start -> fpdu, or "lost" (not decoded from here on)
    why: str = ""


@dataclass
class _Connection:
    crc: bool = False
    markers: bool = False
    dirs: dict[bool, _Direction] = field(default_factory=lambda: {True: _Direction(),
                                                                  False: _Direction()})


Flow = tuple[str, int, str, int]
# TCP connections followed at once: a lab's capture has a handful; a pcap of millions of
# connections must not cost memory for each.
MAX_CONNECTIONS = 4096


class IwarpDecoder:
    """Feed TCP segments in capture order; get the iWARP messages each one completes."""

    def __init__(self) -> None:
        self._conns: dict[frozenset[tuple[str, int]], _Connection] = {}

    def feed(self, flow: Flow, seq: int, payload: bytes, syn: bool) -> tuple[
            list[IwarpMessage], str]:
        """Messages completed by this segment, and why not decoded ('' when fine)."""
        src, sport, dst, dport = flow
        key = frozenset({(src, sport), (dst, dport)})
        conn = self._conns.get(key)
        if conn is None:
            if len(self._conns) >= MAX_CONNECTIONS:  # a capture's memory stays bounded
                return [], f"not followed: more than {MAX_CONNECTIONS} TCP connections"
            conn = self._conns[key] = _Connection()
        d = conn.dirs[(src, sport) < (dst, dport)]
        if syn:
            d.next_seq, d.buffer, d.state = seq + 1, b"", "start"
            return [], ""
        if not payload or d.state == "lost":
            return [], d.why
        if d.next_seq is None:  # the capture began in the middle of this connection
            d.state, d.why = "lost", "capture started mid-connection"
        elif seq != d.next_seq:
            if seq < d.next_seq and seq + len(payload) <= d.next_seq:
                return [], "retransmission"
            d.state, d.why = "lost", "a segment is missing from the capture"
            return [], d.why
        if d.state == "lost":  # the capture began in the middle of this connection
            return [], d.why
        d.next_seq = seq + len(payload)
        d.buffer += payload
        messages: list[IwarpMessage] = []
        while d.state != "lost":
            message = self._next(conn, d)
            if message is None:
                break
            messages.append(message)
        return messages, d.why if d.state == "lost" else ""

    def _next(self, conn: _Connection, d: _Direction) -> IwarpMessage | None:
        if d.state == "start":
            return self._mpa_frame(conn, d)
        return self._fpdu(conn, d)

    @staticmethod
    def _lost(d: _Direction, why: str) -> None:
        d.state, d.why, d.buffer = "lost", why, b""

    def _mpa_frame(self, conn: _Connection, d: _Direction) -> IwarpMessage | None:
        key = d.buffer[:16]
        if not (MPA_REQ_KEY.startswith(key) or MPA_REP_KEY.startswith(key)):
            self._lost(d, "no MPA start frame (not iWARP)")
            return None
        if len(d.buffer) < _MPA_FRAME_MIN:
            return None
        flags, rev, pd_len = struct.unpack_from("!BBH", d.buffer, 16)
        if len(d.buffer) < _MPA_FRAME_MIN + pd_len:
            return None
        d.buffer = d.buffer[_MPA_FRAME_MIN + pd_len:]
        d.state = "fpdu"
        conn.crc |= bool(flags & _MPA_FLAG_CRC)  # CRC is on if either side asks (RFC 5044)
        conn.markers |= bool(flags & _MPA_FLAG_MARKERS)
        name = "MPA_REQUEST" if key == MPA_REQ_KEY else "MPA_REPLY"
        return IwarpMessage(name, {"rev": rev, "markers": bool(flags & _MPA_FLAG_MARKERS),
                                   "crc": bool(flags & _MPA_FLAG_CRC),
                                   "reject": bool(flags & _MPA_FLAG_REJECT),
                                   "enhanced": bool(flags & _MPA_FLAG_ENHANCED),
                                   "private_data": pd_len})

    def _fpdu(self, conn: _Connection, d: _Direction) -> IwarpMessage | None:
        if conn.markers:
            self._lost(d, "MPA markers in use (not decoded)")
            return None
        if len(d.buffer) < 2:
            return None
        ulpdu_len = struct.unpack_from("!H", d.buffer)[0]
        total = 2 + ulpdu_len
        total += -total % 4 + _MPA_CRC_LEN
        if len(d.buffer) < total:
            return None
        ulpdu, crc = d.buffer[2:2 + ulpdu_len], d.buffer[total - _MPA_CRC_LEN:total]
        d.buffer = d.buffer[total:]
        message = parse_ddp_rdmap(ulpdu)
        if message is None:
            self._lost(d, "not a DDP/RDMAP header")
        elif conn.crc:
            message.fields["crc"] = f"0x{crc.hex()}"
        return message


def parse_ddp_rdmap(ulpdu: bytes) -> IwarpMessage | None:
    """One ULPDU: DDP control and RDMAP control bytes, then the tagged or untagged header."""
    if len(ulpdu) < 14:
        return None
    ddp, rdmap = ulpdu[0], ulpdu[1]
    tagged, last, ddp_version = bool(ddp & 0x80), bool(ddp & 0x40), ddp & 0x03
    rdmap_version, opcode = rdmap >> 6, rdmap & 0x0F
    if ddp_version != 1 or rdmap_version != 1 or opcode not in RDMAP_OPCODES:
        return None
    fields: dict[str, Any] = {"last": last, "tagged": tagged}
    if tagged:
        stag, offset = struct.unpack_from("!IQ", ulpdu, 2)
        fields.update(stag=f"0x{stag:x}", to=f"0x{offset:x}", data=len(ulpdu) - 14)
    else:
        if len(ulpdu) < 18:
            return None
        _inv, qn, msn, mo = struct.unpack_from("!IIII", ulpdu, 2)
        fields.update(qn=qn, msn=msn, mo=mo, data=len(ulpdu) - 18)
        if RDMAP_OPCODES[opcode] == "RDMA_READ_REQUEST" and len(ulpdu) >= 18 + 28:
            sink_stag, sink_to, size, src_stag, src_to = struct.unpack_from("!IQIIQ", ulpdu, 18)
            fields.update(sink_stag=f"0x{sink_stag:x}", sink_to=f"0x{sink_to:x}", size=size,
                          src_stag=f"0x{src_stag:x}", src_to=f"0x{src_to:x}")
            del fields["data"]
    return IwarpMessage(RDMAP_OPCODES[opcode], fields)
