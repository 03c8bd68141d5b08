"""RC recovery marks (labctl.wire.recovery): NAKs, PSN gaps, the packets missing until they
came and packets sent again, on made-up packet sequences and on pcaps of real runs
(tests/unit/captures/)."""

from __future__ import annotations

from pathlib import Path

from labctl.wire.ladder import arrow_color, arrow_label
from labctl.wire.recovery import (
    MAX_FLOWS,
    MESSAGE_START_MISSING,
    NEW_CONNECTION,
    PSN_MOD,
    RecoveryMarks,
    gap_mark,
)
from labctl.wire.summary import Clock, decode_file, line

CAPTURES = Path(__file__).parent / "captures"
A, B = "10.77.1.2", "10.77.1.1"
ACK = {"AETH": {"syndrome": "ACK", "credit": "invalid", "msn": 1}}
NAK = {"AETH": {"syndrome": "NAK", "nak": "PSN sequence error", "msn": 0}}
RNR = {"AETH": {"syndrome": "RNR NAK", "rnr_timer": 12, "msn": 0}}


def sends(marks: RecoveryMarks, *psns: int, op: str = "RC_SEND_ONLY") -> list[str]:
    return [marks.mark(A, B, op, 0x15, psn, {}) for psn in psns]


def test_in_order_packets_are_unmarked_and_acks_never_retransmitted() -> None:
    marks = RecoveryMarks()
    assert sends(marks, 10, 11, 12) == ["", "", ""]
    # an ACK may repeat its PSN (coalesced, or acked again): never "retransmitted"
    assert [marks.mark(B, A, "RC_ACKNOWLEDGE", 0x15, 12, ACK) for _ in range(2)] == ["", ""]


def test_a_lost_send_shows_its_gap_the_nak_and_go_back_n() -> None:
    """Lesson 1 of docs/faults.md: PSN 0x9a dropped, 0x9b-0x9d arrive, a NAK, all sent again."""
    marks = RecoveryMarks()
    assert sends(marks, 0x99) == [""]
    assert sends(marks, 0x9b, 0x9c, 0x9d) == ["after a gap: PSN 0x00009a missing", "", ""]
    assert marks.mark(B, A, "RC_ACKNOWLEDGE", 0x15, 0x9a, NAK) == "NAK: PSN sequence error"
    assert sends(marks, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e) == [
        "missing until now", "retransmitted", "retransmitted", "retransmitted", ""]
    assert sends(marks, 0x9a) == ["retransmitted"]  # filled once: a second copy is a resend


def test_gaps_of_several_psns_and_filling_them_out_of_order() -> None:
    marks = RecoveryMarks()
    sends(marks, 100)
    assert sends(marks, 104) == [f"after a gap: 3 PSNs missing ({101:#08x}-{103:#08x})"]
    assert gap_mark(101, 103) == "after a gap: 3 PSNs missing (0x000065-0x000067)"
    assert sends(marks, 102, 101, 103, 102) == ["missing until now"] * 3 + ["retransmitted"]


def test_the_psn_wraps_at_24_bits() -> None:
    marks = RecoveryMarks()
    assert sends(marks, PSN_MOD - 2, PSN_MOD - 1, 0, 1) == ["", "", "", ""]
    assert sends(marks, PSN_MOD - 1) == ["retransmitted"]
    assert sends(marks, 3) == ["after a gap: PSN 0x000002 missing"]


def test_rnr_naks_and_the_send_again() -> None:
    marks = RecoveryMarks()
    sends(marks, 7, op="RC_SEND_ONLY")
    assert marks.mark(B, A, "RC_ACKNOWLEDGE", 0x15, 7, RNR) == "RNR NAK"
    assert sends(marks, 7, op="RC_SEND_ONLY") == ["retransmitted"]


def test_reads_and_other_transports_claim_no_gap() -> None:
    """A READ request takes a PSN per response packet, and responses carry the requester's
    PSNs: neither shows a gap that can be trusted. UD and UC do not recover at all."""
    marks = RecoveryMarks()
    sends(marks, 50, op="RC_RDMA_READ_REQUEST")
    assert sends(marks, 54, op="RC_SEND_ONLY") == [""]  # after a 4-packet read
    assert sends(marks, 50, op="RC_RDMA_READ_REQUEST") == ["retransmitted"]
    response = "RC_RDMA_READ_RESPONSE_ONLY"
    assert [marks.mark(B, A, response, 0x15, psn, ACK) for psn in (50, 53, 52, 53)] == [
        "", "", "missing until now", "retransmitted"]  # 52 late (overtaken), 53 sent again
    for op in ("UD_SEND_ONLY", "UC_SEND_ONLY"):
        assert [marks.mark(A, B, op, 3, 9, {}) for _ in range(2)] == ["", ""]  # same PSN


def test_a_qp_number_used_again_by_a_new_connection_is_no_loss() -> None:
    """Each connection starts at a random PSN: one far from what the QP number carried is
    a new connection, not a gap nor a resend; near it (even far back in a long flow) it is."""
    marks = RecoveryMarks()
    sends(marks, 0x100000, 0x100001)
    assert sends(marks, 0x900000, 0x900001) == ["", ""]  # far ahead: a new start
    assert sends(marks, 0x100000) == [""]  # far behind the new one: again a new start
    sends(marks, *range(0x100001, 0x100001 + NEW_CONNECTION + 10))  # a long flow
    assert sends(marks, 0x100005) == ["retransmitted"]  # far back, but within it
    assert sends(marks, 0x100000 + 2 * NEW_CONNECTION) == [gap_mark(
        0x100000 + NEW_CONNECTION + 11, 0x100000 + 2 * NEW_CONNECTION - 1)]


def test_flows_are_apart_and_bounded() -> None:
    marks = RecoveryMarks()
    sends(marks, 10)
    assert marks.mark(B, A, "RC_SEND_ONLY", 0x15, 10, {}) == ""  # the other direction
    assert marks.mark(A, B, "RC_SEND_ONLY", 0x16, 10, {}) == ""  # another QP
    for qp in range(MAX_FLOWS):  # the oldest flows are forgotten...
        marks.mark(A, "10.0.0.9", "RC_SEND_ONLY", qp, 1, {})
    assert sends(marks, 10) == [""]  # ...so PSN 10 is new to it again


def test_a_message_whose_start_was_never_seen() -> None:
    """The first packet of a flow is a MIDDLE: what came before it is missing, and the
    PSNs before it, when they come, were missing until then."""
    marks = RecoveryMarks()
    assert sends(marks, 0x9b, 0x9c, op="RC_SEND_MIDDLE") == [MESSAGE_START_MISSING, ""]
    assert MESSAGE_START_MISSING == "after a gap: its message's first packet missing"
    assert sends(marks, 0x99, 0x9a, 0x99) == ["missing until now"] * 2 + ["retransmitted"]


def test_the_lost_send_pcap_shows_the_loss_the_nak_and_the_resend() -> None:
    """Lesson 1 of docs/faults.md, live: `labctl fault add node2:eth1 drop --opcode send
    --nth 1` then `labctl run pingpong -n 3 --capture` (captured on node1's link, after the
    drop): the first message's first packet is not there."""
    frames = decode_file(CAPTURES / "rxe-rc-pingpong-lost-send.pcap")
    marked = [(f.ops[0], f.psn, f.recovery) for f in frames if f.recovery]
    lost = marked[0][1] - 1
    assert marked == [
        ("RC_SEND_MIDDLE", lost + 1, "after a gap: its message's first packet missing"),
        ("RC_ACKNOWLEDGE", lost, "NAK: PSN sequence error"),
        ("RC_SEND_FIRST", lost, "missing until now"),
        ("RC_SEND_MIDDLE", lost + 1, "retransmitted"),
        ("RC_SEND_MIDDLE", lost + 2, "retransmitted"),
        ("RC_SEND_LAST", lost + 3, "retransmitted")]
    nak = next(f for f in frames if f.recovery.startswith("NAK"))
    assert line(nak, Clock()).endswith("icrc [NAK: PSN sequence error]")


def test_the_rnr_pcap_shows_each_rnr_nak_and_the_send_again() -> None:
    """The RNR lesson of docs/faults.md, live: node1's server posted its receives 2 s after
    connecting (`pingpong --rnr-delay 2`), node2's client sent at once with --rnr-retry 7
    (`labctl capture node1:eth1 -w ... --filter 'udp port 4791'` alongside)."""
    frames = decode_file(CAPTURES / "rxe-rc-pingpong-rnr.pcap")
    rnr = [f for f in frames if f.recovery == "RNR NAK"]
    again = [f for f in frames if f.recovery == "retransmitted"]
    assert len(rnr) == len(again) == 127  # node2's rcvd_rnr_err grew by 127 in that run
    first = frames[0]
    assert first.ops == ["RC_SEND_ONLY"] and first.recovery == ""
    assert {(f.src, f.psn) for f in again} == {(first.src, first.psn)}  # the one SEND
    assert all(f.detail["AETH"]["rnr_timer"] == 12 for f in rnr)  # pingpong's min_rnr_timer
    # SEND, RNR NAK, the SEND again, RNR NAK ... (one pair crosses on the wire) until the
    # last copy is acknowledged: nothing else before that ACK
    marked = {f.index for f in rnr + again}
    assert [f.index for f in frames[1:255] if f.index not in marked] == []
    assert frames[254].recovery == "retransmitted"
    acked = frames[255]
    assert acked.detail["AETH"]["syndrome"] == "ACK" and acked.psn == first.psn
    assert 2.0 < acked.time - first.time < 2.5  # the receives came after --rnr-delay 2


def test_the_rdma_server_race_pcaps_mark_the_resends() -> None:
    """The race fixtures (test_rdma_server_race): a SEND the peer never acknowledged, sent
    again after each ACK timeout; each resend carries the PSN again."""
    frames = decode_file(CAPTURES / "rxe-rdma-server-race-client-resends.pcap")
    again = [f for f in frames if f.recovery == "retransmitted"]
    assert again and all(f.ops == ["RC_SEND_ONLY"] for f in again)
    assert len({f.psn for f in again}) == 1
    first = next(f for f in frames if f.psn == again[0].psn and f.ops == again[0].ops)
    assert first.recovery == "" and first.index < again[0].index
    assert line(again[0], Clock()).endswith(" icrc [retransmitted]")


def test_captures_without_loss_are_unmarked() -> None:
    for name in ("rxe-rc-pingpong", "rxe-rping", "rxe-rping-routed", "rxe-ib-write-bw",
                 "rxe-ud-pingpong", "docker-rc-pingpong"):
        frames = decode_file(CAPTURES / f"{name}.pcap")
        assert any(f.proto == "RoCEv2" for f in frames), name
        assert [f.index for f in frames if f.recovery] == [], name


def test_the_ladder_labels_and_colours_the_marked_arrows() -> None:
    frames = decode_file(CAPTURES / "rxe-rc-pingpong-lost-send.pcap")
    nak, resend, ack = frames[16], frames[18], frames[21]  # packets 17, 19 and 22
    assert arrow_label(nak) == "RC_ACKNOWLEDGE 0xad77b8 [NAK: PSN sequence error]"
    assert arrow_label(resend) == "RC_SEND_MIDDLE 0xad77b9 [retransmitted]"
    assert arrow_label(ack) == "RC_ACKNOWLEDGE 0xad77bb"  # an ordinary ACK: no mark
    assert arrow_color(nak) == arrow_color(resend) != arrow_color(ack)
    assert arrow_color(ack) != arrow_color(frames[14])  # red ACKs, blue requests, as before
