"""Shared by the capture tests of qemu and docker labs: a captured RC pingpong must show
each side's SENDs to the peer's QPN with the PSNs the programs printed, each ACKed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from labctl.wire.summary import decode_file

ADDRESS = re.compile(r"local address:\s+LID 0x[0-9a-f]+, QPN 0x([0-9a-f]+), PSN 0x([0-9a-f]+), "
                     r"GID ::ffff:([0-9.]+)")


def assert_pingpong_on_the_wire(record: dict[str, Any], iters: int) -> None:
    # Each SEND is ACKed. A retransmission (an ACK late under TCG: seen once, 7 SENDs for
    # 3 iterations in a full CI run) repeats a PSN, so the counts are at least 2 * iters
    # and the distinct PSNs below are exact.
    assert record["capture"]["opcodes"]["RC_SEND_ONLY"] >= 2 * iters
    assert record["capture"]["opcodes"]["RC_ACKNOWLEDGE"] >= 2 * iters
    frames = [f for f in decode_file(Path(record["capture"]["pcap"])) if f.proto == "RoCEv2"]
    printed = {}
    for side in ("server_output", "client_output"):
        qpn, psn, address = ADDRESS.search(record[side]).groups()  # type: ignore[union-attr]
        printed[address] = (int(qpn, 16), int(psn, 16))
    for address, (own_qpn, psn) in printed.items():
        (peer_qpn, _), = [v for a, v in printed.items() if a != address]
        want = [(psn + i) & 0xFFFFFF for i in range(iters)]
        sends = [f for f in frames if f.src == address and f.ops == ["RC_SEND_ONLY"]]
        assert list(dict.fromkeys(f.psn for f in sends)) == want
        assert {f.dest_qp for f in sends} == {peer_qpn}  # sent to the peer's QP
        acks = [f for f in frames if f.dst == address and f.ops == ["RC_ACKNOWLEDGE"]]
        assert list(dict.fromkeys(f.psn for f in acks)) == want
        assert {f.dest_qp for f in acks} == {own_qpn}
