"""Text for people (one line per frame) and counts for records (frames per opcode)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from labctl.wire.capture_record import TtlFlow
from labctl.wire.decode import Decoder, Frame
from labctl.wire.pcapfile import read_packets


def iter_frames(path: Path, first: int | None = None,
                notes: list[str] | None = None) -> Iterator[Frame]:
    """The frames of a pcap one at a time, in capture order (at most `first`): a capture
    of any size costs the memory of one frame, plus the iWARP decoder's bounded state.
    What is wrong with the file (a truncated last packet) goes to `notes`."""
    decoder = Decoder()
    for index, packet in enumerate(read_packets(path, notes), start=1):
        yield decoder.feed(packet, index)
        if first is not None and index >= first:
            return


def decode_file(path: Path, first: int | None = None) -> list[Frame]:
    """The frames as a list: for a bounded `first` (a ladder draws them all at once)."""
    return list(iter_frames(path, first))


@dataclass
class Clock:
    """How a line shows a frame's time: seconds since the first frame this clock stamped
    (`0.000000`, `0.001234`), or with `absolute` the wall-clock time in UTC, ISO 8601 with
    microseconds (`2026-05-04T09:12:30.123456Z`). One clock per capture or file."""

    absolute: bool = False
    start: float | None = None

    def stamp(self, when: float) -> str:
        if self.absolute:
            moment = datetime.fromtimestamp(when, UTC)
            return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if self.start is None:
            self.start = when
        return f"{when - self.start:.6f}"


_HEX_FIELDS = ("local_qpn", "starting_psn", "src_qp")  # as the programs print QPNs and PSNs


def _fields(values: dict[str, Any]) -> str:
    return " ".join(f"{k}={v:#08x}" if k in _HEX_FIELDS and isinstance(v, int) else f"{k}={v}"
                    for k, v in values.items())


def line(frame: Frame, clock: Clock) -> str:
    head = f"{frame.index:5d} {clock.stamp(frame.time)} {frame.src} > {frame.dst} {frame.proto}"
    if frame.proto in ("RoCEv2", "CM", "MAD") and frame.ops:
        parts = [head, frame.ops[0], f"qp={frame.dest_qp:#08x}", f"psn={frame.psn:#08x}"]
        if frame.ackreq:
            parts.append("ackreq")
        for name in ("DETH", "RETH", "AETH", "AtomicETH", "AtomicAckETH", "ImmDt", "IETH"):
            if name in frame.detail:
                parts.append(f"{name}[{_fields(frame.detail[name])}]")
        if "mad" in frame.detail:
            parts.append(f"MAD[{_fields(frame.detail['mad'])}]")
        if frame.detail.get("payload"):
            parts.append(f"payload={frame.detail['payload']}")
        parts.append("icrc")
        if frame.recovery:
            parts.append(f"[{frame.recovery}]")
        return " ".join(parts)
    if frame.proto == "iWARP" and frame.ops:
        messages = "; ".join(f"{m['op']}[{_fields({k: v for k, v in m.items() if k != 'op'})}]"
                             for m in frame.detail["messages"])
        return f"{head} (TCP {frame.detail['tcp']}) {messages}"
    return f"{head} {frame.note}".rstrip()


def count(total: Counter[str], frame: Frame) -> None:
    """Add one frame to opcode counts (an iWARP segment can carry several messages)."""
    for op in frame.ops:
        total[op] += 1
    if not frame.ops:
        total[frame.proto] += 1


def counts(frames: Iterable[Frame]) -> dict[str, int]:
    """Opcodes per name, over every frame: the frames are taken one at a time."""
    total: Counter[str] = Counter()
    for frame in frames:
        count(total, frame)
    return dict(sorted(total.items()))


def opcode_counts(path: Path) -> dict[str, int]:
    return counts(iter_frames(path))


def ttl_flows(path: Path) -> list[TtlFlow]:
    """RoCE v2 packets (UDP 4791) by source, destination and IP TTL: the routers a packet
    passed lowered its TTL by one each (Linux sends with 64)."""
    from scapy.layers.inet import IP, UDP

    from labctl.wire.roce import ROCE_V2_PORT

    seen: Counter[tuple[str, str, int]] = Counter()
    for packet in read_packets(path):
        if IP in packet and UDP in packet and packet[UDP].dport == ROCE_V2_PORT:
            ip = packet[IP]
            seen[str(ip.src), str(ip.dst), int(ip.ttl)] += 1
    return [TtlFlow(src=src, dst=dst, ttl=ttl, packets=n)
            for (src, dst, ttl), n in sorted(seen.items())]


def measured_hops(flows: list[TtlFlow], here: str, peer: str) -> int | None:
    """Routers between `peer` and `here`, as a capture at `here`'s link shows them: the TTL
    `here` sends with minus the TTL `peer`'s packets arrive with (both send with the same
    initial TTL, the kernel's default). None when either direction is missing."""
    sent = [f["ttl"] for f in flows if f["src"] == here and f["dst"] == peer]
    came = [f["ttl"] for f in flows if f["src"] == peer and f["dst"] == here]
    if not sent or not came:
        return None
    return max(sent) - min(came)
