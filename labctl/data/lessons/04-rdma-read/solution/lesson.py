#!/usr/bin/env python3
"""Lesson 4: one-sided RDMA READ (the reference answer)."""

from __future__ import annotations

import sys

from pyverbs import enums as e
from pyverbs.wr import SGE, SendWR
from rdma_common import Lab, pattern, print_digest

# The server's buffer: the peer may read it.
SERVER_ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ


def post_read(lab: Lab) -> None:
    """The client: read the server's whole buffer into its own, from the address and with
    the key the server sent."""
    assert lab.peer is not None
    sge = SGE(lab.mr.buf, lab.bytes, lab.mr.lkey)
    wr = SendWR(wr_id=4, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[sge],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(lab.peer.rkey, lab.peer.addr)
    lab.qp.post_send(wr)


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
