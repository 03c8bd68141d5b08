"""What one fault is: which packets (RoCE v2 BTH fields, or a TCP flow for siw), which of
them (count window, every n-th, probability) and what happens to them. Pure: every value
from the command line is checked here, before anything reaches a node."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from typing_extensions import TypedDict  # pydantic reads only this TypedDict on 3.11

from labctl.errors import UsageError, short_repr

ACTIONS = ("drop", "delay", "duplicate", "reorder", "corrupt")
PSN_MAX = 0xFFFFFF  # 24 bits
QP_MAX = 0xFFFFFF
COUNT_MAX = 1_000_000_000
DEFAULT_DELAY = "10ms"
# Opcode classes by the words in the opcode names of labctl.wire.roce (IBA table 35).
_CLASSES: dict[str, tuple[str, ...]] = {
    "send": ("_SEND_",),
    "write": ("_RDMA_WRITE_",),
    "read-request": ("_RDMA_READ_REQUEST",),
    "read-response": ("_RDMA_READ_RESPONSE_",),
    "ack": ("_ACKNOWLEDGE",),  # ACKs and NAKs: the AETH syndrome tells them apart
    "atomic": ("_COMPARE_SWAP", "_FETCH_ADD"),
    "atomic-ack": ("_ATOMIC_ACKNOWLEDGE",),
}
_NUMBER = re.compile(r"0x[0-9a-fA-F]{1,8}|\d{1,10}")
_PERCENT = re.compile(r"(\d{1,3}(?:\.\d{1,6})?)%|(0(?:\.\d{1,9})?|1(?:\.0{1,9})?)")
_DURATION = re.compile(r"(\d{1,9}(?:\.\d{1,6})?)(us|ms|s)")
_MAX_DELAY_US = 60_000_000


def opcode_table() -> dict[int, str]:
    """Every named BTH opcode (the capture decoder's table, not a second one)."""
    from labctl.wire.roce import opcode_name  # scapy: imported only where used

    return {op: name for op in range(256)
            if not (name := opcode_name(op)).startswith("OPCODE_0x")}


def class_opcodes(word: str, table: dict[int, str]) -> list[int]:
    needles = _CLASSES[word]
    if word == "ack":  # not ATOMIC_ACKNOWLEDGE
        return [op for op, name in table.items()
                if name.endswith("_ACKNOWLEDGE") and "ATOMIC" not in name]
    return [op for op, name in table.items() if any(n in name for n in needles)]


def parse_opcodes(words: list[str]) -> list[int]:
    """Opcode classes (send, ack...), opcode names (RC_SEND_ONLY) or numbers (0x04)."""
    table = opcode_table()
    by_name = {name: op for op, name in table.items()}
    found: set[int] = set()
    for word in words:
        key = word.strip()
        if key.lower() in _CLASSES:
            found.update(class_opcodes(key.lower(), table))
        elif key.upper() in by_name:
            found.add(by_name[key.upper()])
        elif _NUMBER.fullmatch(key) and int(key, 0) in table:
            found.add(int(key, 0))
        else:
            raise UsageError(f"unknown opcode {short_repr(word)}",
                             hint=f"a class ({', '.join(_CLASSES)}), an opcode name such as "
                             "RC_SEND_ONLY, or its number (0x04); "
                             "`labctl fault opcodes` lists them")
    return sorted(found)


def _number(text: str, what: str, top: int) -> int:
    if not _NUMBER.fullmatch(text.strip()) or int(text.strip(), 0) > top:
        raise UsageError(f"bad {what} {short_repr(text)}",
                         hint=f"a number from 0 to {top} (0x{top:x}), decimal or 0x hex")
    return int(text.strip(), 0)


def parse_psn(text: str) -> tuple[int, int]:
    """`N` or `A-B` (inclusive), each a 24-bit PSN."""
    low, dash, high = text.partition("-")
    lo = _number(low, "PSN", PSN_MAX)
    hi = _number(high, "PSN", PSN_MAX) if dash else lo
    if hi < lo:
        raise UsageError(f"bad PSN range {short_repr(text)}: {hi} is below {lo}",
                         hint="write LOW-HIGH, e.g. 100-200 (PSNs do not wrap here)")
    return lo, hi


def parse_probability(text: str) -> float:
    match = _PERCENT.fullmatch(text.strip())
    value = (float(match.group(1)) / 100 if match.group(1) else float(match.group(2))) \
        if match else -1.0
    if not 0 < value <= 1:
        raise UsageError(f"bad --probability {short_repr(text)}",
                         hint="a share above 0 and at most 100%: 30% or 0.3")
    return value


def parse_delay(text: str) -> str:
    match = _DURATION.fullmatch(text.strip())
    scale = {"us": 1, "ms": 1000, "s": 1_000_000}
    if not match or float(match.group(1)) * scale[match.group(2)] > _MAX_DELAY_US:
        raise UsageError(f"bad --delay {short_repr(text)}",
                         hint="a time with its unit: 10ms, 500us, 1s (at most 60 s)")
    return f"{match.group(1)}{match.group(2)}"


def _positive(value: int | None, what: str) -> int:
    if value is None:
        return 0
    if not 1 <= value <= COUNT_MAX:
        raise UsageError(f"bad {what} {value}", hint=f"a whole number from 1 to {COUNT_MAX}")
    return value


class FaultMatch(TypedDict):
    """A fault's match and action, as `fault add --json` and `fault list --json` print it."""

    action: Literal["drop", "delay", "duplicate", "reorder", "corrupt"]
    transport: Literal["roce", "tcp"]
    opcodes: list[int]
    opcode_words: list[str]
    qp: int | None
    psn: list[int] | None  # [low, high], inclusive
    tcp_port: int | None
    skip: int
    count: int  # 0: no limit
    every: int
    probability: float
    delay: str | None


@dataclass(frozen=True)
class FaultSpec:
    action: str
    transport: str  # "roce" (UDP 4791, BTH) or "tcp" (siw's TCP flow)
    opcodes: list[int] = field(default_factory=list)
    opcode_words: list[str] = field(default_factory=list)  # as given: classes, names
    qp: int | None = None
    psn: tuple[int, int] | None = None
    tcp_port: int | None = None
    skip: int = 0  # matching packets let through before the fault starts
    count: int = 0  # 0: no limit
    every: int = 1
    probability: float = 1.0
    delay: str | None = None

    def gate_words(self) -> list[str]:
        """KEY=VALUE arguments of faultgate.py's `load`."""
        lo, hi = self.psn or (0, PSN_MAX)
        threshold = 0xFFFFFFFF if self.probability >= 1 else \
            max(0, round(self.probability * 2**32) - 1)
        return [f"opcodes={','.join(map(str, self.opcodes))}",
                f"bth={1 if self.transport == 'roce' else 0}",
                f"qp={-1 if self.qp is None else self.qp}", f"psn_lo={lo}", f"psn_hi={hi}",
                f"every={self.every}", f"skip={self.skip}", f"count={self.count}",
                f"threshold={threshold}"]

    def describe(self) -> str:
        """One line: what is matched and what happens, e.g. `drop ack count=3`."""
        parts = [self.action + (f" {self.delay}" if self.delay else "")]
        if self.transport == "tcp":
            parts.append("tcp" + (f" port {self.tcp_port}" if self.tcp_port is not None
                                  else ""))
        else:
            parts.append(",".join(self.opcode_words) if self.opcodes else "all RoCE v2")
        if self.qp is not None:
            parts.append(f"qp={self.qp:#x}")
        if self.psn is not None:
            parts.append(f"psn={self.psn[0]}" + (f"-{self.psn[1]}"
                                                 if self.psn[1] != self.psn[0] else ""))
        if self.skip:
            parts.append(f"after {self.skip}")
        if self.every > 1:
            parts.append(f"every {self.every}th")
        if self.count:
            parts.append(f"count={self.count}")
        if self.probability < 1:
            parts.append(f"p={self.probability:g}")
        return " ".join(parts)

    def to_json(self) -> FaultMatch:
        record = asdict(self)
        record["psn"] = list(self.psn) if self.psn else None
        return FaultMatch(**record)  # type: ignore[typeddict-item]

    @classmethod
    def from_json(cls, record: Any) -> FaultSpec:
        """The spec of a faults.json record: data from the lab directory, checked field by
        field as the command line's values are (ValueError naming the bad field)."""
        if not isinstance(record, dict) or set(record) != set(FaultMatch.__annotations__):
            raise ValueError("a fault's spec does not have the fields of one")
        def whole(name: str, low: int, high: int, none: bool = False) -> Any:
            value = record[name]
            if none and value is None:
                return None
            if not (type(value) is int and low <= value <= high):
                raise ValueError(f"bad spec {name}")
            return value
        psn = record["psn"]
        if psn is not None and not (isinstance(psn, list) and len(psn) == 2 and all(
                type(v) is int and 0 <= v <= PSN_MAX for v in psn) and psn[0] <= psn[1]):
            raise ValueError("bad spec psn")
        opcodes, words = record["opcodes"], record["opcode_words"]
        if not (isinstance(opcodes, list) and all(type(o) is int and 0 <= o <= 255
                                                  for o in opcodes)):
            raise ValueError("bad spec opcodes")
        if not (isinstance(words, list) and all(isinstance(w, str) and len(w) <= 64
                                                for w in words)):
            raise ValueError("bad spec opcode_words")
        probability, delay = record["probability"], record["delay"]
        if not (type(probability) in (int, float) and 0 < probability <= 1):
            raise ValueError("bad spec probability")
        if delay is not None:
            try:
                if not isinstance(delay, str) or parse_delay(delay) != delay:
                    raise ValueError("bad spec delay")
            except UsageError:
                raise ValueError("bad spec delay") from None
        if record["action"] not in ACTIONS or record["transport"] not in ("roce", "tcp"):
            raise ValueError("bad spec action or transport")
        return cls(action=record["action"], transport=record["transport"],
                   opcodes=opcodes, opcode_words=words, qp=whole("qp", 0, 0xFFFFFF, True),
                   psn=(psn[0], psn[1]) if psn else None,
                   tcp_port=whole("tcp_port", 1, 65535, True),
                   skip=whole("skip", 0, COUNT_MAX), count=whole("count", 0, COUNT_MAX),
                   every=whole("every", 1, COUNT_MAX), probability=float(probability),
                   delay=delay)


def build_spec(action: str, *, opcodes: list[str], qp: str | None, psn: str | None,
               tcp: bool, tcp_port: int | None, nth: int | None, every: int | None,
               count: int | None, skip: int | None, probability: str | None,
               delay: str | None) -> FaultSpec:
    """The fault the command line describes, or UsageError (exit 2) naming the bad part."""
    if action not in ACTIONS:
        raise UsageError(f"unknown fault action {short_repr(action)}",
                         hint=f"one of {', '.join(ACTIONS)}")
    if tcp_port is not None and not 1 <= tcp_port <= 65535:
        raise UsageError(f"bad --port {tcp_port}", hint="a TCP port from 1 to 65535")
    if tcp_port is not None:
        tcp = True
    if tcp and (opcodes or qp is not None or psn is not None):
        raise UsageError("--opcode, --qp and --psn match RoCE v2 headers, not a TCP flow",
                         hint="on siw (iWARP over TCP) pick the flow with --tcp [--port P]")
    if nth is not None and (count is not None or skip is not None):
        raise UsageError("--nth is one packet: it takes no --count or --skip",
                         hint="--skip N --count M for a window of packets")
    if action in ("delay", "reorder"):
        delay = parse_delay(delay or DEFAULT_DELAY)
    elif delay is not None:
        raise UsageError(f"--delay goes with delay or reorder, not {action}",
                         hint=f"labctl fault add NODE:IF delay --delay {delay}")
    first = _positive(nth, "--nth")
    return FaultSpec(
        action=action, transport="tcp" if tcp else "roce",
        opcodes=parse_opcodes(opcodes),
        opcode_words=[w.strip().lower() if w.strip().lower() in _CLASSES else w.strip()
                      for w in opcodes],
        qp=None if qp is None else _number(qp, "QP", QP_MAX),
        psn=None if psn is None else parse_psn(psn), tcp_port=tcp_port,
        skip=first - 1 if first else (0 if skip is None else _nonnegative(skip, "--skip")),
        count=1 if first else _positive(count, "--count"),
        every=_positive(every, "--every") or 1,
        probability=1.0 if probability is None else parse_probability(probability),
        delay=delay)


def _nonnegative(value: int, what: str) -> int:
    if not 0 <= value <= COUNT_MAX:
        raise UsageError(f"bad {what} {value}", hint=f"a whole number from 0 to {COUNT_MAX}")
    return value
