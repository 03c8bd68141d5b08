#!/usr/bin/env python3
"""Lesson 3: one-sided RDMA WRITE (the reference answer)."""

from __future__ import annotations

import sys

from pyverbs import enums as e
from pyverbs.wr import SGE, SendWR
from rdma_common import Lab, pattern, print_digest

# The server's buffer: the peer may write into it.
SERVER_ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE


def post_write(lab: Lab) -> None:
    """The client: write the whole buffer into the server's, at the address and with the
    key the server sent."""
    assert lab.peer is not None
    sge = SGE(lab.mr.buf, lab.bytes, lab.mr.lkey)
    wr = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[sge],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(lab.peer.rkey, lab.peer.addr)
    lab.qp.post_send(wr)


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
