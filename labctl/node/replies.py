"""What a node sends back, checked before labctl uses it.

A node runs the user's code as root: its reply to `labctl status` (nodeside/status.sh) can
be anything (not JSON, a list, 100k-deep, NaN, the wrong types, 300 MB). The reply is read
bounded (labctl.bounded) and rebuilt here from the fields labctl uses, each of the type
docs/json.md gives; anything else is a BoundedError whose text says which field is wrong.
"""

from __future__ import annotations

import re
import shlex
from types import UnionType
from typing import Any, get_args, get_origin, get_type_hints

from typing_extensions import TypedDict

from labctl import bounded
from labctl.errors import LabctlError, short_repr
from labctl.nodeside import STATUS_COMMAND


class UnreadableReply(LabctlError):
    """`node` answered, but not with a record labctl can use: the node's state
    (`unreadable` in `labctl status`), never a traceback."""

    def __init__(self, node: str, why: str) -> None:
        super().__init__(f"{node} sent an unreadable reply ({why})",
                         hint=f"see what the node prints: `labctl exec {node} -- "
                              f"{shlex.join(STATUS_COMMAND)}`")
        self.node = node
        self.why = why


class DeviceStatus(TypedDict):
    """An RDMA device in a node's status reply (labctl/nodeside/status.sh writes it)."""

    name: str  # rxe0, siw0, rxe_LAB_NODE (container nodes)
    node_type: str
    netdev: str
    port_state: str  # ACTIVE, DOWN, ...
    link_layer: str
    active_mtu: str  # "1024"; "" when ibv_devinfo did not say
    gid_index: int | None  # the IPv4-mapped RoCE v2 GID (None on iWARP)
    gid_ipv4: str


class LiveInterface(TypedDict):
    """An interface in a node's status reply, as the node sees it."""

    name: str
    state: str | None  # operstate: UP, DOWN, ...
    mtu: int | None
    mac: str | None
    ipv4: list[str]  # each item checked by status_reply


def _field_types(record: type) -> dict[str, tuple[type, ...]]:
    """Each key of TypedDict `record` with the Python types its value may have."""
    def kinds(hint: Any) -> tuple[type, ...]:
        if get_origin(hint) is UnionType:
            return tuple(k for arg in get_args(hint) for k in kinds(arg))
        return (get_origin(hint) or hint,)

    return {name: kinds(hint) for name, hint in get_type_hints(record).items()}


_DEVICE_FIELDS = _field_types(DeviceStatus)
_INTERFACE_FIELDS = _field_types(LiveInterface)
_TYPE_NAMES = {str: "a string", int: "a number", list: "a list", type(None): "null"}


def _typed(value: object, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool):  # a bool is an int to Python, not to JSON
        return False
    return isinstance(value, types)


def _record(raw: object, fields: dict[str, tuple[type, ...]], where: str) -> dict[str, Any]:
    """`raw` as an object with exactly `fields` (extra keys dropped), else BoundedError."""
    if not isinstance(raw, dict):
        raise bounded.BoundedError(f"{where} is {bounded.json_kind(raw)}, not an object")
    record = {}
    for name, types in fields.items():
        if name not in raw:
            raise bounded.BoundedError(f"{where} has no {name!r}")
        if not _typed(raw[name], types):
            expected = " or ".join(_TYPE_NAMES[t] for t in types)
            raise bounded.BoundedError(f"{where}.{name} is {bounded.json_kind(raw[name])} "
                                       f"({short_repr(raw[name], 30)}), not {expected}")
        record[name] = raw[name]
    return record


def _records(raw: dict[str, Any], key: str, fields: dict[str, tuple[type, ...]]
             ) -> list[dict[str, Any]]:
    value = raw[key]
    if not isinstance(value, list):
        raise bounded.BoundedError(f"{key} is {bounded.json_kind(value)}, not a list")
    return [_record(item, fields, f"{key}[{i}]") for i, item in enumerate(value)]


# What `uname -r` prints: a release string (the limit is the kernel's, utsname's 64 bytes).
_RELEASE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~-]{0,63}")


def status_reply(text: str, truncated: bool = False) -> dict[str, Any]:
    """The node's status reply as {"devices": [...], "interfaces": [...]}, every field of
    its documented type; BoundedError (saying what is wrong) otherwise."""
    if truncated:
        raise bounded.BoundedError(f"more than {bounded.NODE_REPLY_BYTES} bytes")
    if not text.strip():
        raise bounded.BoundedError("an empty reply")
    raw = bounded.load_object(text, limit=bounded.NODE_REPLY_BYTES)
    if "devices" not in raw:
        raise bounded.BoundedError("no 'devices'")
    devices = _records(raw, "devices", _DEVICE_FIELDS)
    interfaces = _records(raw, "interfaces", _INTERFACE_FIELDS) if "interfaces" in raw else []
    for i, interface in enumerate(interfaces):
        for address in interface["ipv4"]:
            if not isinstance(address, str):
                kind = bounded.json_kind(address)
                raise bounded.BoundedError(f"interfaces[{i}].ipv4 holds {kind}, "
                                           "not only strings")
    kernel = raw.get("kernel")
    if kernel is not None and (not isinstance(kernel, str) or not _RELEASE.fullmatch(kernel)):
        raise bounded.BoundedError(f"kernel is {short_repr(kernel)}, not a kernel release")
    return {"devices": devices, "interfaces": interfaces, "kernel": kernel}
