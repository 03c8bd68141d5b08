#!/usr/bin/env python3
"""Lesson 6: an atomic fetch-and-add.

    node1: python3 lesson.py server [-d DEVICE] [-g GID_INDEX]
    node2: python3 lesson.py client SERVER_IP [-d DEVICE] [-g GID_INDEX]

Fill in the two TODOs; `labctl lesson check 6 --lang python` says what is still wrong."""

from __future__ import annotations

import sys

from pyverbs import enums as e
from pyverbs.wr import SGE, SendWR  # noqa: F401 (for the TODOs)
from rdma_common import Lab, todo

# The server's buffer: the peer may run atomics on it.
# TODO 1: let the peer run atomics on this buffer too.
SERVER_ACCESS = e.IBV_ACCESS_LOCAL_WRITE
START = 1000  # the server's counter: the first 8 bytes of its buffer
ADD = 24  # what the client adds to it


def post_fetch_add(lab: Lab) -> None:
    """The client: add ADD to the server's counter; the counter's value before the add
    comes back into the first 8 bytes of the client's own buffer."""
    # TODO 2: a SendWR with opcode IBV_WR_ATOMIC_FETCH_AND_ADD whose SGE is the first 8
    # bytes of the local buffer (lab.mr.buf, 8, lab.mr.lkey: where the old value lands),
    # IBV_SEND_SIGNALED, and the peer's counter: wr.set_wr_atomic(lab.peer.rkey,
    # lab.peer.addr, ADD); post it on lab.qp.
    todo("add ADD to the server's counter (IBV_WR_ATOMIC_FETCH_AND_ADD)")


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
