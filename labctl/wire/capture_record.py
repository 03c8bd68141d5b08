"""What `labctl run --capture` records of a run's capture: the `capture` of a run's
record (RunResult), as `--json` prints it (docs/json.md)."""

from __future__ import annotations

from typing_extensions import TypedDict  # pydantic reads typing's only from Python 3.12


class TtlFlow(TypedDict):
    src: str  # IPv4 source (a RoCE v2 GID is its IPv4-mapped form)
    dst: str
    ttl: int  # IP TTL as captured: 64 leaving a node, one less per router passed
    packets: int


class CaptureRecord(TypedDict):
    """Where the run's pcap is and what it holds."""

    pcap: str  # path of the pcap file
    node: str  # captured on this node's side of the link (the server's)
    interface: str
    packets: int
    opcodes: dict[str, int]  # packets per decoded opcode name (SEND_ONLY, ACKNOWLEDGE, ...)
    ttl: list[TtlFlow]  # RoCE v2 packets by source, destination and IP TTL
    hops: int | None  # routers between client and server, measured from the TTLs
