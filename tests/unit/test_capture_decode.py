"""The decoders against pcaps recorded from real lab runs (tests/unit/captures/).

Each fixture was written by `labctl run ... --capture` on a two-node qemu lab (rxe), the
siw-pair lab or a two-node docker lab in the Docker host VM (kernel 7.3, rdma-core 56.1);
rxe-rc-pingpong.json and docker-rc-pingpong.json hold those runs' program output, so the
wire is checked against what the programs themselves printed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from scapy.utils import rdpcap

from labctl.wire.decode import Frame
from labctl.wire.summary import Clock, counts, decode_file, line

CAPTURES = Path(__file__).parent / "captures"
PCAPS = sorted(CAPTURES.glob("*.pcap"))
ADDRESS = re.compile(r"local address:\s+LID 0x[0-9a-f]+, QPN 0x([0-9a-f]+), PSN 0x([0-9a-f]+), "
                     r"GID ::ffff:([0-9.]+)")


def roce(frames: list[Frame], op: str) -> list[Frame]:
    return [f for f in frames if f.proto == "RoCEv2" and f.ops == [op]]


@pytest.mark.parametrize("path", PCAPS, ids=[p.name for p in PCAPS])
def test_fixtures_are_small_valid_pcaps(path: Path) -> None:
    assert path.stat().st_size < 100 * 1024
    packets = rdpcap(str(path))  # a standard pcap: scapy (and so Wireshark/tshark) read it
    assert len(packets) > 10
    assert all(line(f, Clock()) for f in decode_file(path))


# rxe-: a qemu lab's tap (scapy's pcap); docker-: a docker lab's veth inside the Docker host
# VM (vmcapture.py's pcap, streamed over ssh), 3 iterations.
@pytest.mark.parametrize(("name", "iters"), [("rxe-rc-pingpong", 5), ("docker-rc-pingpong", 3)])
def test_rc_pingpong_qpns_and_psns_match_what_the_programs_printed(name: str,
                                                                   iters: int) -> None:
    record = json.loads((CAPTURES / f"{name}.json").read_text())
    frames = decode_file(CAPTURES / f"{name}.pcap")
    sends, acks = roce(frames, "RC_SEND_ONLY"), roce(frames, "RC_ACKNOWLEDGE")
    assert len(sends) == len(acks) == 2 * iters  # a send each way per iteration, each acked
    for side in ("server_output", "client_output"):
        qpn, psn, address = ADDRESS.search(record[side]).groups()  # type: ignore[union-attr]
        mine = [f for f in sends if f.src == address]
        assert len(mine) == iters
        # Both QPs are 0x11 here, so the dest QP also equals the peer's printed QPN.
        assert {f.dest_qp for f in mine} == {int(qpn, 16)}
        # The first SEND carries the PSN the program printed; each next one is +1.
        assert [f.psn for f in mine] == [int(psn, 16) + i for i in range(iters)]
        assert all(f.ackreq for f in mine)
        # The peer acknowledges each with the same PSN and a growing MSN.
        theirs = [f for f in acks if f.dst == address]
        assert [f.psn for f in theirs] == [f.psn for f in mine]
        assert [f.detail["AETH"]["msn"] for f in theirs] == list(range(1, iters + 1))
        assert {f.detail["AETH"]["syndrome"] for f in theirs} == {"ACK"}
    assert all(re.fullmatch(r"0x[0-9a-f]{8}", f.detail["icrc"]) for f in sends + acks)
    assert all(f.detail["payload"] == 64 for f in sends)


def test_ib_write_bw_has_reth_on_the_first_write_packet_only() -> None:
    frames = decode_file(CAPTURES / "rxe-ib-write-bw.pcap")
    writes = [f for f in frames if f.ops and f.ops[0].startswith("RC_RDMA_WRITE")]
    assert {f.ops[0] for f in writes} == {"RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_MIDDLE",
                                          "RC_RDMA_WRITE_LAST"}
    for f in writes:
        if f.ops[0] == "RC_RDMA_WRITE_FIRST":
            assert f.detail["RETH"]["length"] == 4096  # the whole message, 4 packets of 1024
            assert f.detail["RETH"]["rkey"].startswith("0x")
        else:
            assert "RETH" not in f.detail
        assert f.detail["payload"] == 1024  # the path MTU
        assert f.ackreq == (f.ops[0] == "RC_RDMA_WRITE_LAST")  # one ACK request per message
    psns = [f.psn for f in writes]
    assert psns == list(range(psns[0], psns[0] + len(psns)))  # one PSN per packet
    assert "iWARP" not in counts(frames)  # perftest's TCP exchange is plain TCP
    lasts = {f.psn for f in writes if f.ops[0] == "RC_RDMA_WRITE_LAST"}
    assert {f.psn for f in roce(frames, "RC_ACKNOWLEDGE")} <= lasts


def test_rping_shows_the_cm_handshake_and_its_qpns_and_psns() -> None:
    frames = decode_file(CAPTURES / "rxe-rping.pcap")
    cm = [f for f in frames if f.proto == "CM"]
    assert [f.ops[0] for f in cm] == ["CM_REQ", "CM_REP", "CM_RTU", "CM_DREQ", "CM_DREP"]
    assert {f.dest_qp for f in cm} == {1}  # QP1, the GSI
    assert {f.detail["DETH"]["src_qp"] for f in cm} == {1}
    req, rep = cm[0], cm[1]
    client, server = req.src, req.dst
    assert req.detail["mad"]["port"] == 7174  # rping's default RDMA CM port
    assert rep.detail["mad"]["remote_comm_id"] == req.detail["mad"]["local_comm_id"]
    rc = [f for f in frames if f.proto == "RoCEv2"]
    assert {f.dest_qp for f in rc if f.dst == server} == {rep.detail["mad"]["local_qpn"]}
    assert {f.dest_qp for f in rc if f.dst == client} == {req.detail["mad"]["local_qpn"]}
    # As measured on rxe: each side's first request carries the starting PSN of the
    # other side's CM message (REQ's for the server's sends, REP's for the client's).
    first = {who: next(f.psn for f in rc if f.src == who and "ACK" not in f.ops[0])
             for who in (client, server)}
    assert first[server] == req.detail["mad"]["starting_psn"]
    assert first[client] == rep.detail["mad"]["starting_psn"]
    ops = counts(frames)
    assert ops["RC_RDMA_READ_REQUEST"] == ops["RC_RDMA_READ_RESPONSE_ONLY"] == 3
    assert ops["RC_RDMA_WRITE_ONLY"] == 3


def test_ud_pingpong_carries_deth() -> None:
    frames = decode_file(CAPTURES / "rxe-ud-pingpong.pcap")
    sends = roce(frames, "UD_SEND_ONLY")
    assert len(sends) == 6 and not roce(frames, "RC_ACKNOWLEDGE")  # UD: no ACKs
    for f in sends:
        assert f.detail["DETH"]["qkey"] == "0x11111111"  # ibv_ud_pingpong's Q_Key
        assert f.detail["DETH"]["src_qp"] == f.dest_qp == 0x13


def test_siw_rping_decodes_mpa_ddp_rdmap() -> None:
    frames = decode_file(CAPTURES / "siw-rping.pcap")
    iwarp = [f for f in frames if f.proto == "iWARP"]
    assert not [f for f in iwarp if not f.ops], [line(f, Clock()) for f in iwarp if not f.ops]
    assert [f.ops[0] for f in iwarp[:4]] == ["MPA_REQUEST", "MPA_REPLY", "SEND",
                                             "RDMA_READ_REQUEST"]
    mpa = iwarp[0].detail["messages"][0]
    assert mpa["rev"] == 2 and mpa["enhanced"] and not mpa["markers"] and not mpa["crc"]
    ops = counts(frames)
    assert ops["RDMA_READ_REQUEST"] == ops["RDMA_READ_RESPONSE"] == 3
    assert ops["RDMA_WRITE"] == 3
    messages = [m for f in iwarp for m in f.detail["messages"]]
    reads = [m for m in messages if m["op"] == "RDMA_READ_REQUEST"]
    responses = [m for m in messages if m["op"] == "RDMA_READ_RESPONSE"]
    # A Read Response is tagged: it lands at the sink STag/TO the request named.
    assert [(m["stag"], m["to"]) for m in responses] == [
        (m["sink_stag"], m["sink_to"]) for m in reads]
    assert all(m["tagged"] for m in responses) and not any(m["tagged"] for m in reads)
    sends = [m for m in messages if m["op"] == "SEND"]
    assert all(m["qn"] == 0 for m in sends) and all(m["qn"] == 1 for m in reads)


def test_ttl_flows_and_hops_of_an_rping_across_a_router() -> None:
    """A capture at node1's link of `labctl run rping --lab routed --capture` (node2 on the
    other segment): node1 sends with TTL 64, node2's packets arrive with 63."""
    from labctl.wire.summary import measured_hops, ttl_flows

    flows = ttl_flows(CAPTURES / "rxe-rping-routed.pcap")
    assert [(f["src"], f["dst"], f["ttl"]) for f in flows] == [
        ("10.77.1.2", "10.77.2.2", 64), ("10.77.2.2", "10.77.1.2", 63)]
    assert sum(f["packets"] for f in flows) == 41
    assert measured_hops(flows, "10.77.1.2", "10.77.2.2") == 1
    assert measured_hops(flows, "10.77.1.2", "10.77.9.9") is None
    # one segment: nothing lowers the TTL
    same = ttl_flows(CAPTURES / "rxe-rping.pcap")
    assert measured_hops(same, "10.77.1.1", "10.77.1.2") == 0
