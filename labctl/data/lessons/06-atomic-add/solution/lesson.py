#!/usr/bin/env python3
"""Lesson 6: an atomic fetch-and-add (the reference answer)."""

from __future__ import annotations

import sys

from pyverbs import enums as e
from pyverbs.wr import SGE, SendWR
from rdma_common import Lab

# The server's buffer: the peer may run atomics on it.
SERVER_ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_ATOMIC
START = 1000  # the server's counter: the first 8 bytes of its buffer
ADD = 24  # what the client adds to it


def post_fetch_add(lab: Lab) -> None:
    """The client: add ADD to the server's counter; the counter's value before the add
    comes back into the first 8 bytes of the client's own buffer."""
    assert lab.peer is not None
    sge = SGE(lab.mr.buf, 8, lab.mr.lkey)
    wr = SendWR(wr_id=6, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1, sg=[sge],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_atomic(lab.peer.rkey, lab.peer.addr, ADD)
    lab.qp.post_send(wr)


def counter(lab: Lab) -> int:
    return int.from_bytes(lab.mr.read(8, 0), sys.byteorder)


def main() -> None:
    is_server = sys.argv[1:2] == ["server"]
    lab = Lab(SERVER_ACCESS if is_server else e.IBV_ACCESS_LOCAL_WRITE)
    if lab.is_server:  # the counter, there before the client may add to it
        lab.mr.write(START.to_bytes(8, sys.byteorder), 8, 0)
    lab.connect()
    if lab.is_server:  # no receive, no completion: the client says when it is done
        lab.expect_line("done")
        print(f"counter {counter(lab)}")
    else:
        post_fetch_add(lab)
        lab.wait_completion()
        lab.say("done")
        print(f"fetched {counter(lab)}")


if __name__ == "__main__":
    main()
