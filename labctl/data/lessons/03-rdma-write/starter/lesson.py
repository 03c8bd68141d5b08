#!/usr/bin/env python3
"""Lesson 3: one-sided RDMA WRITE.

    node1: python3 lesson.py server [-d DEVICE] [-g GID_INDEX]
    node2: python3 lesson.py client SERVER_IP [-d DEVICE] [-g GID_INDEX]

Fill in the two TODOs; `labctl lesson check 3 --lang python` says what is still wrong."""

from __future__ import annotations

import sys

from pyverbs import enums as e
from pyverbs.wr import SGE, SendWR  # noqa: F401 (for the TODOs)
from rdma_common import Lab, pattern, print_digest, todo

# The server's buffer: the peer may write into it.
# TODO 1: let the peer write into this buffer too.
SERVER_ACCESS = e.IBV_ACCESS_LOCAL_WRITE


def post_write(lab: Lab) -> None:
    """The client: write the whole buffer into the server's, at the address and with the
    key the server sent."""
    # TODO 2: a SendWR with opcode IBV_WR_RDMA_WRITE for the whole buffer (an SGE of
    # lab.mr.buf, lab.bytes, lab.mr.lkey), IBV_SEND_SIGNALED, and the peer's memory:
    # wr.set_wr_rdma(lab.peer.rkey, lab.peer.addr); then post it on lab.qp.
    todo("RDMA WRITE the whole buffer into the server's (IBV_WR_RDMA_WRITE)")


def main() -> None:
    is_server = sys.argv[1:2] == ["server"]
    lab = Lab(SERVER_ACCESS if is_server else e.IBV_ACCESS_LOCAL_WRITE)
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
