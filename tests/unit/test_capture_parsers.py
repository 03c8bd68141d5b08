"""Decoder edge cases the recorded captures do not reach: NAKs, atomics, gaps, refusals."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest

from labctl.capture.target import check_filter, resolve
from labctl.errors import UsageError
from labctl.providers import provider_for
from labctl.store.labdir import LabDir
from labctl.topology.resolved import Lab
from labctl.wire.cm import parse_mad
from labctl.wire.iwarp import MPA_REQ_KEY, IwarpDecoder
from labctl.wire.roce import aeth_syndrome, opcode_name, parse_bth


def bth(opcode: int, dqpn: int, psn: int, ackreq: bool = False) -> bytes:
    return struct.pack("!BBHII", opcode, 0, 0xFFFF, dqpn, (ackreq << 31) | psn)


def test_aeth_syndromes() -> None:
    assert aeth_syndrome(0x1F, 7) == {"syndrome": "ACK", "credit": "invalid", "msn": 7}
    assert aeth_syndrome(0x03, 1)["credit"] == 3
    assert aeth_syndrome(0x2E, 2) == {"syndrome": "RNR NAK", "rnr_timer": 14, "msn": 2}
    assert aeth_syndrome(0x60, 3)["nak"] == "PSN sequence error"
    assert aeth_syndrome(0x62, 3)["nak"] == "remote access error"


def test_opcode_names_cover_transports() -> None:
    assert opcode_name(0x04) == "RC_SEND_ONLY"
    assert opcode_name(0x2A) == "UC_RDMA_WRITE_ONLY"
    assert opcode_name(0x64) == "UD_SEND_ONLY"
    assert opcode_name(0x17) == "RC_SEND_ONLY_WITH_INVALIDATE"
    assert opcode_name(0xFE) == "OPCODE_0xfe"


def test_atomic_request_and_ack() -> None:
    eth = struct.pack("!QIQQ", 0x1000, 0x42, 5, 9)
    packet = parse_bth(bth(0x13, 0x11, 10, True) + eth + b"\0" * 4)
    assert packet is not None and packet.name == "RC_COMPARE_SWAP"
    assert packet.headers["AtomicETH"] == {"va": "0x1000", "rkey": "0x42", "swap_add": 5,
                                           "compare": 9}
    ack = parse_bth(bth(0x12, 0x11, 10) + struct.pack("!IQ", (0x1F << 24) | 1, 77) + b"\0" * 4)
    assert ack is not None and ack.headers["AtomicAckETH"] == {"orig": 77}
    assert ack.headers["AETH"]["syndrome"] == "ACK"


def test_write_with_immediate_and_truncation() -> None:
    reth = struct.pack("!QII", 0xABC, 0x7, 8)
    packet = parse_bth(bth(0x0B, 0x11, 1, True) + reth + b"\x00\x00\x00\x2a" + b"d" * 8
                       + b"\0" * 4)
    assert packet is not None and packet.headers["ImmDt"] == {"imm": "0x0000002a"}
    assert packet.payload == b"d" * 8
    assert parse_bth(b"\x04" * 10) is None
    short = parse_bth(bth(0x0A, 0x11, 1) + b"\0" * 4)  # RETH missing
    assert short is not None and short.headers["RETH"] == {"truncated": True}


def test_non_cm_mads_are_named_by_class() -> None:
    header = struct.pack("!BBBBHHQHHI", 1, 0x04, 1, 1, 0, 0, 5, 0x12, 0, 0)
    mad = parse_mad(header + b"\0" * 232)
    assert mad is not None and mad.name == "MAD_PerfMgt"
    assert parse_mad(b"\x01\x07") is None


def _mpa_request() -> bytes:
    return MPA_REQ_KEY + struct.pack("!BBH", 0x10, 2, 4) + b"\0\1\0\1"


def test_iwarp_gap_and_mid_connection_are_not_decoded() -> None:
    decoder = IwarpDecoder()
    flow = ("10.0.0.2", 40000, "10.0.0.1", 7174)
    assert decoder.feed(flow, 99, b"", syn=True) == ([], "")
    messages, why = decoder.feed(flow, 100, _mpa_request(), syn=False)
    assert [m.name for m in messages] == ["MPA_REQUEST"] and why == ""
    send = struct.pack("!HBB4xIII", 18 + 4, 0x41, 0x43, 0, 1, 0) + b"abcd" + b"\0" * 4
    messages, why = decoder.feed(flow, 100 + 24, send, syn=False)
    assert [m.name for m in messages] == ["SEND"] and messages[0].fields["data"] == 4
    # The same bytes again: a retransmission, ignored.
    assert decoder.feed(flow, 100 + 24, send, syn=False) == ([], "retransmission")
    # A hole: from here on this direction is not decoded, and says why.
    messages, why = decoder.feed(flow, 5000, send, syn=False)
    assert messages == [] and "missing" in why
    other = IwarpDecoder()
    messages, why = other.feed(flow, 1234, send, syn=False)
    assert messages == [] and "mid-connection" in why


def test_plain_tcp_is_not_taken_for_iwarp() -> None:
    decoder = IwarpDecoder()
    flow = ("10.0.0.2", 40000, "10.0.0.1", 18515)
    decoder.feed(flow, 0, b"", syn=True)
    messages, why = decoder.feed(flow, 1, b"0000:000011:7f7a14:", syn=False)
    assert messages == [] and "not iWARP" in why


def test_bad_bpf_filter_is_bad_input() -> None:
    check_filter("udp port 4791 or tcp")
    with pytest.raises(UsageError, match="bad --filter"):
        check_filter("udp prt 4791")


@pytest.mark.parametrize(("provider", "placement", "kind"), [
    ("vagrant", {}, "vagrant"),
    ("docker", {"node1": "a", "node2": "b"}, "multi-host docker"),
])
def test_labs_without_labctls_links_are_refused_with_a_hint(
        provider: str, placement: dict[str, str], kind: str) -> None:
    """Docker labs are captured (their veths); vagrant and multi-host labs have no
    namespace of ours: their provider's capabilities say so."""
    lab = Lab("d", provider, "", (), (), provider_options={"placement": placement})
    handle = SimpleNamespace(lab=lab, provider=provider_for(lab, LabDir("d")))
    with pytest.raises(UsageError, match=f"capture is not supported for {kind} labs") as info:
        resolve(handle, "node1", "eth1")  # type: ignore[arg-type]
    assert info.value.exit_code == 2 and "tcpdump" in (info.value.hint or "")
    assert "use a qemu or docker lab" in (info.value.hint or "")
