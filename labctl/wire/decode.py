"""One captured frame -> one Frame record: who sent it to whom, and what RDMA it carries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import ARP
from scapy.packet import Packet

from labctl.wire.cm import parse_mad
from labctl.wire.iwarp import IwarpDecoder
from labctl.wire.recovery import RecoveryMarks
from labctl.wire.roce import ROCE_V2_PORT, parse_bth


@dataclass
class Frame:
    index: int  # 1-based, in capture order
    time: float
    src: str
    dst: str
    proto: Literal["RoCEv2", "CM", "MAD", "iWARP", "TCP", "UDP", "ARP", "other"]
    ops: list[str] = field(default_factory=list)  # opcode names (an iWARP segment: several)
    psn: int | None = None
    dest_qp: int | None = None
    ackreq: bool = False
    detail: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # e.g. why an iWARP segment is not decoded
    # RC recovery seen on the wire (labctl.wire.recovery): 'NAK: ...', 'RNR NAK', 'after a
    # gap: ...', 'missing until now', 'retransmitted'; '' for an ordinary packet
    recovery: str = ""

    @property
    def label(self) -> str:
        """Short text for a ladder arrow: opcode and PSN."""
        if not self.ops:
            return self.proto + (f" {self.note}" if self.note else "")
        text = " + ".join(self.ops[:2]) + (" ..." if len(self.ops) > 2 else "")
        return text + (f" {self.psn:#08x}" if self.proto == "RoCEv2" and self.psn is not None
                       else "")


class Decoder:
    """Stateful (iWARP needs each TCP stream in order): feed frames in capture order."""

    def __init__(self) -> None:
        self._iwarp = IwarpDecoder()
        self._recovery = RecoveryMarks()

    def feed(self, packet: Packet, index: int) -> Frame:
        when = float(packet.time)
        if ARP in packet:
            arp = packet[ARP]
            return Frame(index, when, arp.psrc, arp.pdst, "ARP",
                         note="who-has" if arp.op == 1 else "is-at")
        if IP not in packet:
            return Frame(index, when, packet.src if hasattr(packet, "src") else "?",
                         getattr(packet, "dst", "?"), "other", note=packet.summary())
        ip = packet[IP]
        if UDP in packet and packet[UDP].dport == ROCE_V2_PORT:
            return self._roce(index, when, ip.src, ip.dst, bytes(packet[UDP].payload))
        if TCP in packet:
            return self._tcp(index, when, ip.src, ip.dst, packet[TCP])
        if UDP in packet:
            udp = packet[UDP]
            return Frame(index, when, ip.src, ip.dst, "UDP",
                         note=f"{udp.sport} > {udp.dport} len {len(udp.payload)}")
        return Frame(index, when, ip.src, ip.dst, "other", note=f"IP proto {ip.proto}")

    def _roce(self, index: int, when: float, src: str, dst: str, data: bytes) -> Frame:
        roce = parse_bth(data)
        if roce is None:
            return Frame(index, when, src, dst, "RoCEv2", note="too short for a BTH")
        detail: dict[str, Any] = {**roce.headers, "icrc": f"0x{roce.icrc:08x}",
                                  "payload": len(roce.payload)}
        frame = Frame(index, when, src, dst, "RoCEv2", [roce.name], roce.psn, roce.dest_qp,
                      roce.ackreq, detail)
        if roce.is_mad:
            mad = parse_mad(roce.payload)
            if mad is not None:
                frame.proto = "CM" if mad.name.startswith("CM_") else "MAD"
                frame.ops = [mad.name]
                frame.detail["mad"] = {"tid": f"0x{mad.tid:x}", **mad.fields}
        else:
            frame.recovery = self._recovery.mark(src, dst, roce.name, roce.dest_qp, roce.psn,
                                                 detail)
        return frame

    def _tcp(self, index: int, when: float, src: str, dst: str, tcp: Any) -> Frame:
        payload = bytes(tcp.payload)
        flow = (src, int(tcp.sport), dst, int(tcp.dport))
        messages, why = self._iwarp.feed(flow, int(tcp.seq), payload, bool(tcp.flags.S))
        ports = f"{tcp.sport} > {tcp.dport}"
        if messages:
            return Frame(index, when, src, dst, "iWARP", [m.name for m in messages],
                         detail={"tcp": ports, "messages": [
                             {"op": m.name, **m.fields} for m in messages]})
        if not payload or "not iWARP" in why:
            flags = str(tcp.flags)
            return Frame(index, when, src, dst, "TCP",
                         note=f"{ports} [{flags}]" + (f" len {len(payload)}" if payload else ""))
        if why:
            return Frame(index, when, src, dst, "iWARP",
                         note=f"(TCP {ports}, len {len(payload)}), not decoded: {why}")
        # Part of an FPDU that a later segment completes.
        return Frame(index, when, src, dst, "iWARP", note=f"(TCP {ports}) continued",
                     detail={"tcp": ports, "len": len(payload)})
