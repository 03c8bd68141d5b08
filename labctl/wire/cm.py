"""RDMA CM connection setup on the wire: IB CM MADs (management class 0x07) on QP1.

scapy has no MAD layers. The MAD common header (IBA 13.4.2) is 24 bytes; the CM messages'
fields used here sit at fixed offsets in the 232-byte data after it (IBA 12.6).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

MAD_HEADER_LEN = 24
CM_CLASS = 0x07
CM_ATTRIBUTES = {0x0001: "ClassPortInfo", 0x0010: "REQ", 0x0011: "MRA", 0x0012: "REJ",
                 0x0013: "REP", 0x0014: "RTU", 0x0015: "DREQ", 0x0016: "DREP",
                 0x0017: "SIDR_REQ", 0x0018: "SIDR_REP", 0x0019: "LAP", 0x001A: "APR"}
_CLASSES = {0x01: "SubnMgt", 0x03: "SubnAdm", 0x04: "PerfMgt", 0x06: "DevMgt", 0x07: "CM"}


@dataclass
class Mad:
    mgmt_class: int
    method: int
    attribute: int
    tid: int
    name: str  # CM_REQ, CM_REP, ... or MAD_class_0x..
    fields: dict[str, Any] = field(default_factory=dict)


def _u24(data: bytes, offset: int) -> int:
    return int.from_bytes(data[offset:offset + 3], "big")


def _cm_fields(attribute: str, data: bytes) -> dict[str, Any]:
    if attribute == "REQ" and len(data) >= 48:
        comm_id, service_id = struct.unpack_from("!I4xQ", data, 0)
        fields = {"local_comm_id": f"0x{comm_id:08x}", "local_qpn": _u24(data, 32),
                  "starting_psn": _u24(data, 44)}
        if service_id >> 16 in (0x0106, 0x0111):  # RDMA CM's TCP and IB port spaces
            fields["port"] = service_id & 0xFFFF
        return fields
    if attribute == "REP" and len(data) >= 24:
        local, remote = struct.unpack_from("!II", data, 0)
        return {"local_comm_id": f"0x{local:08x}", "remote_comm_id": f"0x{remote:08x}",
                "local_qpn": _u24(data, 12), "starting_psn": _u24(data, 20)}
    if attribute in ("RTU", "DREQ", "DREP", "REJ", "MRA") and len(data) >= 8:
        local, remote = struct.unpack_from("!II", data, 0)
        fields = {"local_comm_id": f"0x{local:08x}", "remote_comm_id": f"0x{remote:08x}"}
        if attribute == "REJ" and len(data) >= 12:
            fields["reason"] = struct.unpack_from("!H", data, 10)[0]
        return fields
    return {}


def parse_mad(data: bytes) -> Mad | None:
    if len(data) < MAD_HEADER_LEN:
        return None
    _base, mgmt_class, _cv, method, _status, _cs, tid, attr = struct.unpack_from(
        "!BBBBHHQH", data, 0)
    if mgmt_class != CM_CLASS:
        label = _CLASSES.get(mgmt_class, f"class_0x{mgmt_class:02x}")
        return Mad(mgmt_class, method, attr, tid, f"MAD_{label}")
    attribute = CM_ATTRIBUTES.get(attr, f"attr_0x{attr:04x}")
    return Mad(mgmt_class, method, attr, tid, f"CM_{attribute}",
               _cm_fields(attribute, data[MAD_HEADER_LEN:]))
