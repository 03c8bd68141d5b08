#!/usr/bin/env python3
"""Lesson 5: RDMA WRITE with immediate (the reference answer)."""

from __future__ import annotations

import socket
import sys
from typing import Any

from pyverbs import enums as e
from pyverbs.wr import SGE, RecvWR, SendWR
from rdma_common import Lab, fail, pattern, print_digest

# The server's buffer: the peer may write into it.
SERVER_ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
# The 32 bits the client sends along with its bytes.
IMMEDIATE = 0xC0DE0005


def post_receive(lab: Lab) -> None:
    """The server: a receive for the immediate to complete. The bytes go where the WRITE
    says, only the immediate comes through the receive; pyverbs wants one SGE in a
    RecvWR all the same, so it names the buffer, and nothing lands there through it."""
    sge = SGE(lab.mr.buf, lab.bytes, lab.mr.lkey)
    lab.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[sge]))


def post_write_imm(lab: Lab) -> None:
    """The client: write the whole buffer into the server's, with IMMEDIATE."""
    assert lab.peer is not None
    sge = SGE(lab.mr.buf, lab.bytes, lab.mr.lkey)
    wr = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1, sg=[sge],
                imm_data=socket.htonl(IMMEDIATE),  # it travels in network byte order
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(lab.peer.rkey, lab.peer.addr)
    lab.qp.post_send(wr)


def immediate_of(wc: Any) -> int:
    """The server: the immediate its receive's completion carries, in host byte order."""
    if wc.opcode != e.IBV_WC_RECV_RDMA_WITH_IMM or not wc.wc_flags & e.IBV_WC_WITH_IMM:
        fail("the completion is not a WRITE with immediate's")
    return socket.ntohl(wc.imm_data)


def main() -> None:
    is_server = sys.argv[1:2] == ["server"]
    lab = Lab(SERVER_ACCESS if is_server else e.IBV_ACCESS_LOCAL_WRITE)
    if lab.is_server:
        post_receive(lab)  # before the client hears "ready"
    lab.connect()
    if lab.is_server:
        wc = lab.wait_completion()
        print(f"immediate 0x{immediate_of(wc):08x}")
        print_digest(lab.mr.read(lab.bytes, 0))
        lab.expect_line("done")
    else:
        lab.mr.write(pattern(lab.bytes), lab.bytes, 0)
        post_write_imm(lab)
        lab.wait_completion()
        lab.say("done")
        print(f"wrote {lab.bytes} bytes with immediate 0x{IMMEDIATE:08x}")


if __name__ == "__main__":
    main()
