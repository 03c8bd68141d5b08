"""RoCE v2 (UDP 4791): the Base Transport Header and the extension headers after it.

scapy's `scapy.contrib.roce` gives BTH (opcode names, dest QP, PSN, AckReq, the ICRC as the
trailing 4 bytes) and AETH. It has no RETH, DETH, ImmDt, IETH or AtomicETH; those are
fixed-size big-endian fields whose presence and order follow from the opcode alone (IBA
vol. 1, 9.2 and table 35), so one struct table below decodes all of them, AETH included,
to keep that order in one place.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from scapy.contrib.roce import BTH, _bth_opcodes

ROCE_V2_PORT = 4791
BTH_LEN = 12
ICRC_LEN = 4
GSI_QP = 1  # QP1: management datagrams (the RDMA CM's connection setup)

# Opcodes scapy does not name (IBA 1.3: send with invalidate).
_EXTRA_OPCODES = {0x16: "RC_SEND_LAST_WITH_INVALIDATE", 0x17: "RC_SEND_ONLY_WITH_INVALIDATE"}
_AETH_NAK_CODES = {0: "PSN sequence error", 1: "invalid request", 2: "remote access error",
                   3: "remote operational error", 4: "invalid RD request"}


def opcode_name(opcode: int) -> str:
    name = _bth_opcodes.get(opcode) or _EXTRA_OPCODES.get(opcode)
    return str(name) if name else f"OPCODE_0x{opcode:02x}"


def _headers(name: str) -> list[str]:
    """The extension headers after BTH for an opcode name such as RC_RDMA_WRITE_FIRST."""
    transport, _, op = name.partition("_")
    heads: list[str] = []
    if transport == "UD":
        heads.append("DETH")
    if op in ("RDMA_WRITE_FIRST", "RDMA_WRITE_ONLY", "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
              "RDMA_READ_REQUEST"):
        heads.append("RETH")
    if op in ("COMPARE_SWAP", "FETCH_ADD"):
        heads.append("AtomicETH")
    if op in ("ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE", "RDMA_READ_RESPONSE_FIRST",
              "RDMA_READ_RESPONSE_LAST", "RDMA_READ_RESPONSE_ONLY"):
        heads.append("AETH")
    if op == "ATOMIC_ACKNOWLEDGE":
        heads.append("AtomicAckETH")
    if op.endswith("WITH_IMMEDIATE"):
        heads.append("ImmDt")
    if op.endswith("WITH_INVALIDATE"):
        heads.append("IETH")
    return heads


_SIZES = {"DETH": 8, "RETH": 16, "AtomicETH": 28, "AETH": 4, "AtomicAckETH": 8, "ImmDt": 4,
          "IETH": 4}


def aeth_syndrome(syndrome: int, msn: int) -> dict[str, Any]:
    """AETH syndrome: ACK with its credit count, RNR NAK with its timer, or NAK with a code."""
    kind, value = syndrome >> 5, syndrome & 0x1F
    if kind == 0:
        credit = "invalid" if value == 0x1F else value  # 0x1f: no credit count
        return {"syndrome": "ACK", "credit": credit, "msn": msn}
    if kind == 1:
        return {"syndrome": "RNR NAK", "rnr_timer": value, "msn": msn}
    if kind == 3:
        return {"syndrome": "NAK", "nak": _AETH_NAK_CODES.get(value, f"code {value}"),
                "msn": msn}
    return {"syndrome": f"reserved 0x{syndrome:02x}", "msn": msn}


def _parse(head: str, data: bytes) -> dict[str, Any]:
    if head == "DETH":
        qkey, srcqp = struct.unpack("!II", data)
        return {"qkey": f"0x{qkey:08x}", "src_qp": srcqp & 0xFFFFFF}
    if head == "RETH":
        va, rkey, length = struct.unpack("!QII", data)
        return {"va": f"0x{va:x}", "rkey": f"0x{rkey:x}", "length": length}
    if head == "AtomicETH":
        va, rkey, swap_add, compare = struct.unpack("!QIQQ", data)
        return {"va": f"0x{va:x}", "rkey": f"0x{rkey:x}", "swap_add": swap_add,
                "compare": compare}
    if head == "AETH":
        word = struct.unpack("!I", data)[0]
        return aeth_syndrome(word >> 24, word & 0xFFFFFF)
    if head == "AtomicAckETH":
        return {"orig": struct.unpack("!Q", data)[0]}
    if head == "ImmDt":
        return {"imm": f"0x{struct.unpack('!I', data)[0]:08x}"}
    return {"inv_rkey": f"0x{struct.unpack('!I', data)[0]:x}"}  # IETH


@dataclass
class RocePacket:
    opcode: int
    name: str  # e.g. RC_SEND_ONLY
    dest_qp: int
    psn: int
    ackreq: bool
    solicited: bool
    pkey: int
    headers: dict[str, dict[str, Any]] = field(default_factory=dict)
    payload: bytes = b""  # after the extension headers, without the ICRC
    icrc: int | None = None

    @property
    def is_mad(self) -> bool:
        return self.dest_qp == GSI_QP and self.name.startswith("UD_")


def parse_bth(data: bytes) -> RocePacket | None:
    """Decode a UDP 4791 payload; None if it is too short to be one."""
    if len(data) < BTH_LEN + ICRC_LEN:
        return None
    bth = BTH(data[:BTH_LEN] + data[-ICRC_LEN:])  # scapy takes the ICRC from the end
    name = opcode_name(bth.opcode)
    packet = RocePacket(bth.opcode, name, bth.dqpn, bth.psn, bool(bth.ackreq),
                        bool(bth.solicited), bth.pkey, icrc=bth.icrc)
    rest = data[BTH_LEN:-ICRC_LEN]
    for head in _headers(name):
        size = _SIZES[head]
        if len(rest) < size:
            packet.headers[head] = {"truncated": True}
            return packet
        packet.headers[head] = _parse(head, rest[:size])
        rest = rest[size:]
    packet.payload = rest
    return packet
