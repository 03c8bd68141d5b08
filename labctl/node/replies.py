"""What a node (or the Docker host) sends back, checked before labctl uses it.

Everything labctl runs outside its process answers in one format (labctl/nodeside/reply.py):
one JSON line, its last, {"labctl_reply": VERSION, "ok": true, "data": ...} or
{"labctl_reply": VERSION, "ok": false, "error": "..."}. `read_reply` is the one reader of
it: the sender runs the user's code as root, so the reply can be anything (not JSON, a
list, 100k-deep, NaN, 300 MB, never ending). It is read bounded (labctl.bounded), checked,
and what is wrong becomes a LabctlError with a hint, never a traceback. Each payload is
then rebuilt by its own reader from the fields labctl uses (`status_reply` here for
`labctl status`), each of the type docs/json.md gives; anything else is a BoundedError
whose text says which field is wrong.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from types import UnionType
from typing import Any, get_args, get_origin, get_type_hints

from typing_extensions import TypedDict

from labctl import bounded
from labctl.errors import LabctlError, short_repr
from labctl.nodeside import STATUS_COMMAND, reply

ERROR_CHARS = 500  # of a sender's own error message: enough for a reason, never a dump


class UnreadableReply(LabctlError):
    """`node` answered, but not with a reply labctl can use: the node's state
    (`unreadable` in `labctl status`), never a traceback."""

    def __init__(self, node: str, why: str, hint: str | None = None) -> None:
        super().__init__(f"{node} sent an unreadable reply ({why})",
                         hint=hint or f"see what the node prints: `labctl exec {node} -- "
                                      f"{shlex.join(STATUS_COMMAND)}`")
        self.node = node
        self.why = why


class ErrorReply(LabctlError):
    """The sender answered that the work failed (`"ok": false`), saying why."""


def read_reply(result: subprocess.CompletedProcess[str], *, sender: str, doing: str,
               hint: str) -> Any:
    """The payload of `result`'s reply: what `sender` (a node's name, "the Docker host VM")
    printed when labctl tried `doing` there ("read status of", "load the fault's gate in").
    LabctlError otherwise, each with `hint`: "cannot DOING SENDER: why" when the command
    failed before answering (its last stderr line or exit) or answered "ok": false
    (ErrorReply, the sender's reason), an UnreadableReply when the reply is too large, cut,
    not JSON, not this format or of another version."""
    truncated = bool(getattr(result, "truncated", False))
    try:
        envelope = None if truncated else _envelope(result.stdout)
    except bounded.BoundedError as exc:
        if result.returncode == 0:
            raise UnreadableReply(sender, str(exc), hint) from None
        envelope = None  # it failed before answering: say how it failed
    if envelope is None and not truncated:
        raise LabctlError(f"cannot {doing} {sender}: {_failure(result)}", hint=hint)
    if envelope is None:
        raise UnreadableReply(sender, f"more than {bounded.NODE_REPLY_BYTES} bytes", hint)
    return _payload(envelope, sender, doing, hint)


def _envelope(text: str) -> dict[str, Any]:
    """The reply line of `text` as an object, else BoundedError saying what is wrong."""
    if not text.strip():
        raise bounded.BoundedError("an empty reply")
    if not text.endswith("\n"):  # cut off, or still being written when it was stopped
        raise bounded.BoundedError("a reply that did not end (no newline after "
                                   f"{len(text)} bytes)")
    last = text.rstrip("\n").rpartition("\n")[2]
    envelope = bounded.load_object(last, limit=bounded.NODE_REPLY_BYTES)
    version = envelope.get(reply.KEY)
    if version is None:
        raise bounded.BoundedError(f"not a labctl reply (no {reply.KEY!r})")
    if version != reply.VERSION or isinstance(version, bool):
        raise bounded.BoundedError(f"reply version {short_repr(version, 20)}; this labctl "
                                   f"reads version {reply.VERSION}")
    if envelope.get("ok") not in (True, False):
        raise bounded.BoundedError(f"ok is {short_repr(envelope.get('ok'), 20)}, "
                                   "not true or false")
    if envelope["ok"] and "data" not in envelope:
        raise bounded.BoundedError("no 'data'")
    if not envelope["ok"] and not isinstance(envelope.get("error"), str):
        raise bounded.BoundedError("an error reply without its message")
    return envelope


def _payload(envelope: dict[str, Any], sender: str, doing: str, hint: str) -> Any:
    if envelope["ok"]:
        return envelope["data"]
    message = bounded.printable(envelope["error"].strip())
    if len(message) > ERROR_CHARS:
        message = message[:ERROR_CHARS] + "…"
    raise ErrorReply(f"cannot {doing} {sender}: {message or 'no reason given'}", hint=hint)


def _failure(result: subprocess.CompletedProcess[str]) -> str:
    """How a command that printed no reply failed: its last stderr line, or its exit."""
    lines = result.stderr.strip().splitlines()
    why = lines[-1] if lines else f"exit {result.returncode}"
    return bounded.printable(why if len(why) <= 300 else why[:300] + "…")


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


def status_reply(raw: Any) -> dict[str, Any]:
    """A node's status payload (nodeside/status.sh's, read by read_reply) as
    {"devices": [...], "interfaces": [...], "kernel": ...}, every field of its documented
    type; BoundedError (saying what is wrong) otherwise."""
    if not isinstance(raw, dict):
        raise bounded.BoundedError(f"a status that is {bounded.json_kind(raw)}, not an object")
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


def node_status(result: subprocess.CompletedProcess[str], node: str) -> dict[str, Any]:
    """`node`'s answer to STATUS_COMMAND as status_reply's record; LabctlError (an
    UnreadableReply when it answered with something unusable) otherwise."""
    hint = f"see what the node prints: `labctl exec {node} -- {shlex.join(STATUS_COMMAND)}`"
    payload = read_reply(result, sender=node, doing="read status of", hint=hint)
    try:
        return status_reply(payload)
    except bounded.BoundedError as exc:
        raise UnreadableReply(node, str(exc), hint) from None
