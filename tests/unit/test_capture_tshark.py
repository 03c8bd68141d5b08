"""An independent oracle for the decoder: Wireshark's own dissectors (tshark) on the checked-in
pcaps of real lab runs must see the same RDMA packets with the same opcodes, QPNs, PSNs and
AckReq bits (RoCE v2 BTH, CM MADs, RETH/AETH), and the same iWARP MPA/RDMAP messages.
Skipped when tshark is not installed (scripts/setup.sh installs it where Debian has it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from labctl.wire.cm import CM_ATTRIBUTES
from labctl.wire.iwarp import RDMAP_OPCODES
from labctl.wire.roce import opcode_name
from labctl.wire.summary import decode_file

CAPTURES = Path(__file__).parent / "captures"
ROCE_PCAPS = sorted(p.name for p in CAPTURES.glob("*.pcap") if not p.name.startswith("siw-"))
pytestmark = pytest.mark.skipif(shutil.which("tshark") is None,
                                reason="tshark is not installed (apt-get install tshark)")


def tshark(pcap: Path, display: str, *fields: str) -> dict[int, list[str]]:
    """Frame number -> the fields' values (several occurrences joined by commas)."""
    argv = ["tshark", "-n", "-r", str(pcap), "-Y", display, "-T", "fields",
            "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,",
            "-e", "frame.number", *[a for f in fields for a in ("-e", f)]]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    return {int(row[0]): row[1:] for row in rows}


@pytest.mark.parametrize("name", ROCE_PCAPS)
def test_wireshark_sees_the_same_bth_as_labctl(name: str) -> None:
    pcap = CAPTURES / name
    theirs = tshark(pcap, "infiniband.bth", "infiniband.bth.opcode", "infiniband.bth.destqp",
                    "infiniband.bth.psn", "infiniband.bth.a", "infiniband.mad.mgmtclass",
                    "infiniband.mad.attributeid", "infiniband.reth.dmalen",
                    "infiniband.aeth.msn")
    ours = {f.index: f for f in decode_file(pcap) if f.proto in ("RoCEv2", "CM", "MAD")}
    assert theirs and sorted(theirs) == sorted(ours)
    for number, (opcode, qp, psn, ackreq, mclass, attribute, length, msn) in theirs.items():
        frame = ours[number]
        if mclass:  # a MAD on QP1: labctl names the CM message, Wireshark its attribute ID
            assert int(mclass, 16) == 0x07
            assert frame.ops == [f"CM_{CM_ATTRIBUTES[int(attribute, 16)]}"], number
        else:
            assert frame.ops == [opcode_name(int(opcode))], number
        assert (frame.dest_qp, frame.psn, frame.ackreq) == (int(qp, 16), int(psn),
                                                           ackreq == "1"), number
        if length:
            assert frame.detail["RETH"]["length"] == int(length), number
        if msn:
            assert frame.detail["AETH"]["msn"] == int(msn), number


def test_wireshark_sees_the_same_iwarp_messages_as_labctl() -> None:
    pcap = CAPTURES / "siw-rping.pcap"
    mpa = tshark(pcap, "iwarp_mpa.key.req or iwarp_mpa.key.rep", "iwarp_mpa.key.req")
    rdmap = tshark(pcap, "iwarp_rdma", "iwarp_rdma.opcode")
    theirs = {n: ["MPA_REQUEST" if req else "MPA_REPLY"] for n, (req,) in mpa.items()}
    for number, (opcodes,) in rdmap.items():
        theirs[number] = [RDMAP_OPCODES[int(op, 16)] for op in opcodes.split(",")]
    ours = {f.index: f.ops for f in decode_file(pcap) if f.proto == "iWARP" and f.ops}
    assert len(theirs) > 20 and theirs == ours
