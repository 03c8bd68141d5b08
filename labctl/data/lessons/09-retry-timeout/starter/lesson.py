#!/usr/bin/env python3
"""Lesson 9: survive a lost packet (retry_cnt and timeout).

    node1: python3 lesson.py server [-d DEVICE] [-g GID_INDEX]
    node2: python3 lesson.py client SERVER_IP [-d DEVICE] [-g GID_INDEX]

The client RDMA WRITEs 4096 bytes (four packets) into the server's buffer, as in lesson 3,
while `labctl lesson check 9 --lang python` drops its first 12 WRITE packets on the wire.
Fill in the two TODOs so that the client's queue pair sends the message again until it
gets through; the check says what is still wrong."""

from __future__ import annotations

import sys

from pyverbs import enums as e
from pyverbs.wr import SGE, SendWR
from rdma_common import Lab, pattern, print_digest

# TODO 1: how many times the client's QP sends a message again when no ACK comes, before
# its work request completes with IBV_WC_RETRY_EXC_ERR. 3 bits: 0 to 7 (rxe takes 7 as
# "for ever"). How many tries does the fault take from you?
RETRY_CNT = 1

# TODO 2: how long it waits for that ACK: 4.096 us * 2^ACK_TIMEOUT (0: for ever, never
# sent again). 10 is 4.2 ms, shorter than an ACK takes to come back in a slow lab: the QP
# would send again what already arrived, and spend its retries on that. The client waits
# 30 s for its completion in all.
ACK_TIMEOUT = 10

SERVER_ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE


def post_write(lab: Lab) -> None:
    assert lab.peer is not None
    sge = SGE(lab.mr.buf, lab.bytes, lab.mr.lkey)
    wr = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[sge],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(lab.peer.rkey, lab.peer.addr)
    lab.qp.post_send(wr)


def main() -> None:
    is_server = sys.argv[1:2] == ["server"]
    lab = Lab(SERVER_ACCESS if is_server else e.IBV_ACCESS_LOCAL_WRITE)
    # connect() puts these in the QP's attributes when it moves it to RTS
    lab.retry_cnt, lab.timeout = RETRY_CNT, ACK_TIMEOUT
    lab.connect()
    if lab.is_server:  # no receive, no completion: the client says when it is done
        lab.expect_line("done")
        print_digest(lab.mr.read(lab.bytes, 0))
    else:
        lab.mr.write(pattern(lab.bytes), lab.bytes, 0)
        post_write(lab)
        lab.wait_completion()
        lab.say("done")
        print(f"wrote {lab.bytes} bytes")


if __name__ == "__main__":
    main()
