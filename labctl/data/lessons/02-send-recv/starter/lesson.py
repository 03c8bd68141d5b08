#!/usr/bin/env python3
"""Lesson 2: register memory and SEND a message on RC.

    node1: python3 lesson.py server [-d DEVICE] [-g GID_INDEX]
    node2: python3 lesson.py client SERVER_IP [-d DEVICE] [-g GID_INDEX]

Fill in the two TODOs; `labctl lesson check 2 --lang python` says what is still wrong."""

from __future__ import annotations

from pyverbs import enums as e
from pyverbs.wr import SGE, RecvWR, SendWR  # noqa: F401 (for the TODOs)
from rdma_common import Lab, fail, pattern, print_digest, todo


def post_receive(lab: Lab) -> None:
    """The server: a receive for the whole buffer, for the client's SEND to land in."""
    # TODO 1: describe the whole buffer (lab.mr.buf, lab.bytes, lab.mr.lkey) in an SGE,
    # put it in a RecvWR and post it on lab.qp.
    todo("post a receive for the whole buffer (qp.post_recv)")


def post_send(lab: Lab) -> None:
    """The client: SEND the whole buffer."""
    # TODO 2: the same buffer in a SendWR with opcode IBV_WR_SEND and IBV_SEND_SIGNALED
    # (so that the SEND makes a completion), posted on lab.qp.
    todo("SEND the whole buffer (qp.post_send with IBV_WR_SEND)")


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
