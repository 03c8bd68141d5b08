#!/usr/bin/env python3
"""Lesson 4: one-sided RDMA READ.

    node1: python3 lesson.py server [-d DEVICE] [-g GID_INDEX]
    node2: python3 lesson.py client SERVER_IP [-d DEVICE] [-g GID_INDEX]

Fill in the two TODOs; `labctl lesson check 4 --lang python` says what is still wrong."""

from __future__ import annotations

import sys

from pyverbs import enums as e
from pyverbs.wr import SGE, SendWR  # noqa: F401 (for the TODOs)
from rdma_common import Lab, pattern, print_digest, todo

# The server's buffer: the peer may read it.
# TODO 1: let the peer read this buffer too.
SERVER_ACCESS = e.IBV_ACCESS_LOCAL_WRITE


def post_read(lab: Lab) -> None:
    """The client: read the server's whole buffer into its own, from the address and with
    the key the server sent."""
    # TODO 2: a SendWR with opcode IBV_WR_RDMA_READ whose SGE is the whole local buffer
    # (lab.mr.buf, lab.bytes, lab.mr.lkey: where the bytes land), IBV_SEND_SIGNALED, and
    # the peer's memory: wr.set_wr_rdma(lab.peer.rkey, lab.peer.addr); post it on lab.qp.
    todo("RDMA READ the server's whole buffer into this one (IBV_WR_RDMA_READ)")


def main() -> None:
    is_server = sys.argv[1:2] == ["server"]
    lab = Lab(SERVER_ACCESS if is_server else e.IBV_ACCESS_LOCAL_WRITE)
    if lab.is_server:  # the bytes the client reads, there before it may
        lab.mr.write(pattern(lab.bytes), lab.bytes, 0)
    lab.connect()
    if lab.is_server:  # no receive, no completion: the client says when it is done
        lab.expect_line("done")
        print(f"served {lab.bytes} bytes")
    else:
        post_read(lab)
        lab.wait_completion()
        lab.say("done")
        print_digest(lab.mr.read(lab.bytes, 0))


if __name__ == "__main__":
    main()
