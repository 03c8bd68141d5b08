#!/usr/bin/env python3
"""Lesson 5: RDMA WRITE with immediate.

    node1: python3 lesson.py server [-d DEVICE] [-g GID_INDEX]
    node2: python3 lesson.py client SERVER_IP [-d DEVICE] [-g GID_INDEX]

Fill in the three TODOs; `labctl lesson check 5 --lang python` says what is still wrong."""

from __future__ import annotations

import socket  # noqa: F401 (for the TODOs)
import sys
from typing import Any

from pyverbs import enums as e
from pyverbs.wr import SGE, RecvWR, SendWR  # noqa: F401 (for the TODOs)
from rdma_common import Lab, fail, pattern, print_digest, todo  # noqa: F401

# The server's buffer: the peer may write into it.
SERVER_ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
# The 32 bits the client sends along with its bytes.
IMMEDIATE = 0xC0DE0005


def post_receive(lab: Lab) -> None:
    """The server: a receive for the immediate to complete. The bytes go where the WRITE
    says, only the immediate comes through the receive; pyverbs wants one SGE in a
    RecvWR all the same, so it names the buffer, and nothing lands there through it."""
    # TODO 1: a RecvWR with one SGE (lab.mr.buf, lab.bytes, lab.mr.lkey), posted on
    # lab.qp: the WRITE with immediate consumes it.
    todo("post a receive for the immediate (qp.post_recv)")


def post_write_imm(lab: Lab) -> None:
    """The client: write the whole buffer into the server's, with IMMEDIATE."""
    # TODO 2: like lesson 3's RDMA WRITE (an SGE of the whole buffer, the peer's memory
    # with wr.set_wr_rdma(lab.peer.rkey, lab.peer.addr), IBV_SEND_SIGNALED), with opcode
    # IBV_WR_RDMA_WRITE_WITH_IMM and imm_data=socket.htonl(IMMEDIATE) (network byte order).
    todo("RDMA WRITE the whole buffer with IMMEDIATE (IBV_WR_RDMA_WRITE_WITH_IMM)")


def immediate_of(wc: Any) -> int:
    """The server: the immediate its receive's completion carries, in host byte order."""
    # TODO 3: check the completion is a WRITE with immediate's (wc.opcode is
    # IBV_WC_RECV_RDMA_WITH_IMM, wc.wc_flags has IBV_WC_WITH_IMM; else fail(...)) and
    # return wc.imm_data in host byte order (socket.ntohl).
    todo("the immediate from the receive's completion (wc.imm_data)")


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
