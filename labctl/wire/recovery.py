"""How RC recovers, read off the wire: which RoCE packets are NAKs, which come after a
PSN gap (packets this capture never saw: lost, or dropped by `labctl fault` before the
capture point), which were missing until they came, and which are sent again (a PSN seen
before in the same flow).

Needs no knowledge of a fault, only the packets, and says no more than they do: a PSN
that was missing until now was either sent again or overtaken (a delay); one seen before
was sent again. The state per flow is a PSN range and a few missing ranges, and the flows
are bounded, so a capture of any size costs the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PSN_MOD = 1 << 24
MAX_FLOWS = 4096  # flows remembered; beyond that the oldest is forgotten
MAX_GAPS = 16  # missing ranges remembered per flow; beyond that the oldest is forgotten
# PSNs further than this from what a flow carried start a new connection that reuses the QP
# number (each connection starts at a random PSN), not a loss: far more than the packets a
# QP keeps in flight (ib_write_bw's 128 outstanding 64 KiB writes are 8192 PSNs at 1024).
NEW_CONNECTION = 1 << 16
_RESPONSES = ("ACKNOWLEDGE", "RDMA_READ_RESPONSE")  # ATOMIC_ACKNOWLEDGE ends in the first
Flow = tuple[str, str, int, bool]  # src, dst, destination QP, carries responses
MISSING_UNTIL_NOW = "missing until now"
RETRANSMITTED = "retransmitted"
MESSAGE_START_MISSING = "after a gap: its message's first packet missing"


def nak_mark(aeth: dict[str, Any]) -> str:
    """'NAK: PSN sequence error', 'RNR NAK' or '' (an ACK) for a decoded AETH."""
    if aeth.get("syndrome") == "NAK":
        return f"NAK: {aeth.get('nak')}"
    if aeth.get("syndrome") == "RNR NAK":
        return "RNR NAK"
    return ""


def gap_mark(first_missing: int, last_missing: int) -> str:
    count = (last_missing - first_missing) % PSN_MOD + 1
    if count == 1:
        return f"after a gap: PSN {first_missing:#08x} missing"
    return f"after a gap: {count} PSNs missing ({first_missing:#08x}-{last_missing:#08x})"


def _before(psn: int, other: int) -> bool:
    """psn comes before other in the 24-bit PSN space (within half of it)."""
    return 0 < (other - psn) % PSN_MOD < PSN_MOD // 2


@dataclass
class _FlowState:
    lowest: int  # the PSNs from lowest to highest were seen, but for `gaps`
    highest: int
    gaps: list[tuple[int, int]] = field(default_factory=list)  # (first PSN, count)
    after_read: bool = False  # its last new request was a READ request

    def fill(self, psn: int) -> bool:
        """Whether `psn` was missing; it is not any more."""
        for i, (first, count) in enumerate(self.gaps):
            offset = (psn - first) % PSN_MOD
            if offset < count:
                after = (first + offset + 1) % PSN_MOD, count - offset - 1
                self.gaps[i:i + 1] = [g for g in ((first, offset), after) if g[1]]
                return True
        return False

    def add_gap(self, first: int, count: int) -> None:
        self.gaps.append((first, count))
        del self.gaps[:-MAX_GAPS]


class RecoveryMarks:
    """Feed the RC packets of a capture in order; `mark` says what each shows of recovery."""

    def __init__(self) -> None:
        self._flows: dict[Flow, _FlowState] = {}  # in order of last use

    def mark(self, src: str, dst: str, op: str, dest_qp: int, psn: int,
             detail: dict[str, Any]) -> str:
        """'' for an ordinary packet; else 'NAK: ...', 'RNR NAK', 'after a gap: ...',
        'missing until now' or 'retransmitted'. Only reliable-connected (RC_) packets are
        judged."""
        if not op.startswith("RC_"):
            return ""
        if "AETH" in detail and "ACKNOWLEDGE" in op:
            return nak_mark(detail["AETH"])  # ACKs repeat PSNs: not retransmissions
        flow = (src, dst, dest_qp, any(r in op for r in _RESPONSES))
        state = self._flows.pop(flow, None)
        if state is not None and self._far(psn, state):
            state = None  # the QP number's next connection: judged afresh
        if state is None:
            state = _FlowState(psn, psn, after_read="READ_REQUEST" in op)
            self._keep(flow, state)
            # a MIDDLE or LAST packet first: the capture missed its message's start
            return MESSAGE_START_MISSING if op.endswith(("_MIDDLE", "_LAST")) else ""
        self._keep(flow, state)
        if _before(psn, state.lowest):  # before anything seen: its message was cut short
            if _before((psn + 1) % PSN_MOD, state.lowest):
                state.add_gap((psn + 1) % PSN_MOD, (state.lowest - psn - 1) % PSN_MOD)
            state.lowest = psn
            return MISSING_UNTIL_NOW
        ahead = (psn - state.highest) % PSN_MOD
        if ahead == 0 or ahead >= PSN_MOD // 2:  # not after the highest
            return MISSING_UNTIL_NOW if state.fill(psn) else RETRANSMITTED
        after_read, state.after_read = state.after_read, "READ_REQUEST" in op
        state.highest = psn
        if ahead == 1:
            return ""
        first = (psn - ahead + 1) % PSN_MOD
        state.add_gap(first, ahead - 1)  # so that a late one is not taken for a resend
        # A READ request takes a PSN per response packet (the MTU says how many) and a
        # response's PSN is its request's, so neither shows a gap that can be trusted.
        if after_read or flow[3]:
            return ""
        return gap_mark(first, (psn - 1) % PSN_MOD)

    @staticmethod
    def _far(psn: int, state: _FlowState) -> bool:
        """psn is not within NEW_CONNECTION of the PSNs the flow carried (lowest..highest)."""
        offset = (psn - state.lowest) % PSN_MOD
        span = (state.highest - state.lowest) % PSN_MOD
        return span + NEW_CONNECTION < offset < PSN_MOD - NEW_CONNECTION

    def _keep(self, flow: Flow, state: _FlowState) -> None:
        if len(self._flows) >= MAX_FLOWS:
            del self._flows[next(iter(self._flows))]
        self._flows[flow] = state
