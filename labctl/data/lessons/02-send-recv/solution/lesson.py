#!/usr/bin/env python3
"""Lesson 2: register memory and SEND a message on RC (the reference answer)."""

from __future__ import annotations

from pyverbs import enums as e
from pyverbs.wr import SGE, RecvWR, SendWR
from rdma_common import Lab, fail, pattern, print_digest


def post_receive(lab: Lab) -> None:
    """The server: a receive for the whole buffer, for the client's SEND to land in."""
    sge = SGE(lab.mr.buf, lab.bytes, lab.mr.lkey)
    lab.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[sge]))


def post_send(lab: Lab) -> None:
    """The client: SEND the whole buffer."""
    sge = SGE(lab.mr.buf, lab.bytes, lab.mr.lkey)
    lab.qp.post_send(SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge],
                            send_flags=e.IBV_SEND_SIGNALED))


def main() -> None:
    lab = Lab(e.IBV_ACCESS_LOCAL_WRITE)
    if lab.is_server:
        post_receive(lab)  # before the client hears "ready"
    lab.connect()
    if lab.is_server:
        wc = lab.wait_completion()
        if wc.opcode != e.IBV_WC_RECV:
            fail("the completion is not a receive's")
        lab.expect_line("done")
        print_digest(lab.mr.read(lab.bytes, 0))
    else:
        lab.mr.write(pattern(lab.bytes), lab.bytes, 0)
        post_send(lab)
        lab.wait_completion()
        lab.say("done")
        print(f"sent {lab.bytes} bytes")


if __name__ == "__main__":
    main()
