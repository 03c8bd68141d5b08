"""rdma_server/rdma_client's hang on rxe, as the wire showed it (docs/reliability.md).

Both pcaps were written by `labctl run rdma-server --capture` on a two-node rxe lab under a
loaded host (node1 10.77.1.1 server, node2 10.77.1.2 client); each run's first attempt hung,
the second (a fresh pair) passed. In each, one side received the peer's SEND (its program saw
the completion and went on) but never acknowledged it: it disconnected at once (CM DREQ),
its QP went to error, and the peer resent that SEND every ~0.5 s, unanswered, because a
retry count of 7 is unlimited on rxe.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest

from labctl.wire.decode import Frame
from labctl.wire.summary import decode_file

CAPTURES = Path(__file__).parent / "captures"
SERVER, CLIENT = "10.77.1.1", "10.77.1.2"


def _op(frame: Frame) -> str:
    return frame.ops[0] if frame.ops else frame.proto


def _attempts(frames: list[Frame]) -> list[list[Frame]]:
    """The capture cut at each CM REQ: one list of frames per connection attempt."""
    cuts = [i for i, f in enumerate(frames) if _op(f) == "CM_REQ"]
    return [frames[a:b] for a, b in zip(cuts, [*cuts[1:], len(frames)], strict=True)]


@pytest.mark.parametrize(("pcap", "resender"), [
    ("rxe-rdma-server-race-client-resends.pcap", CLIENT),
    ("rxe-rdma-server-race-server-resends.pcap", SERVER),
])
def test_a_send_never_acknowledged_is_resent_after_the_peer_disconnected(
        pcap: str, resender: str) -> None:
    first, second = _attempts(decode_file(CAPTURES / pcap))
    peer = SERVER if resender == CLIENT else CLIENT
    resent = [f for f in first if f.src == resender and _op(f) == "RC_SEND_ONLY"]
    psns = {f.psn for f in resent}
    assert len(psns) == 1 and len(resent) >= 10, "one SEND, resent again and again"
    acked = {f.psn for f in first if _op(f) == "RC_ACKNOWLEDGE" and f.src == peer}
    assert not psns & acked, "the peer never acknowledged it"
    # ... although the peer had received it and finished: it answered (its own SEND went
    # out, acknowledged by the resender) and disconnected before the first resend.
    peer_send = next(f for f in first if f.src == peer and _op(f) == "RC_SEND_ONLY")
    assert any(f.src == resender and _op(f) == "RC_ACKNOWLEDGE" and f.psn == peer_send.psn
               for f in first)
    dreq = next(f for f in first if f.src == peer and _op(f) == "CM_DREQ")
    assert dreq.index < resent[1].index
    gaps = [b.time - a.time for a, b in pairwise(resent)]
    assert 0.3 < sorted(gaps)[len(gaps) // 2] < 1.0  # rxe's retransmit timer, ~0.54 s
    # The fresh pair: both SENDs acknowledged, both sides disconnect.
    sends = [f for f in second if _op(f) == "RC_SEND_ONLY"]
    acks = {(f.src, f.psn) for f in second if _op(f) == "RC_ACKNOWLEDGE"}
    assert len(sends) == 2
    assert all((SERVER if s.src == CLIENT else CLIENT, s.psn) in acks for s in sends)
    assert {f.src for f in second if _op(f) == "CM_DREP"} == {SERVER, CLIENT}
