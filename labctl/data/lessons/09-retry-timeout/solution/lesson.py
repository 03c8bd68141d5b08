#!/usr/bin/env python3
"""Lesson 9: survive a lost packet, retry_cnt and timeout (the reference answer)."""

from __future__ import annotations

import sys

from pyverbs import enums as e
from pyverbs.wr import SGE, SendWR
from rdma_common import Lab, pattern, print_digest

# The fault takes the first three tries (12 packets, 4 a try): 3 retries get the fourth
# try through, and 3 more are left for a loss the lesson did not plan. Not 7: rxe takes 7
# as "for ever", and a peer that is gone would hang the client.
RETRY_CNT = 6

# 4.096 us * 2^18 = 1.07 s: far above an ACK's round trip even in a slow, busy lab (no
# retry spent on a packet that arrived), and 4 tries take 4.3 s, well within the
# client's 30 s.
ACK_TIMEOUT = 18

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
