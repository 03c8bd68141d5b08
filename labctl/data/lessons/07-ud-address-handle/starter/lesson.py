#!/usr/bin/env python3
"""Lesson 7: a datagram on UD through an address handle.

    node1: python3 lesson.py server [-d DEVICE] [-g GID_INDEX]
    node2: python3 lesson.py client SERVER_IP [-d DEVICE] [-g GID_INDEX]

Fill in the two TODOs; `labctl lesson check 7 --lang python` says what is still wrong."""

from __future__ import annotations

from pyverbs import enums as e
from pyverbs.addr import AH, AHAttr, GlobalRoute  # noqa: F401 (for the TODOs)
from pyverbs.wr import SGE, RecvWR, SendWR
from rdma_common import GRH_BYTES, IB_PORT, LAB_QKEY, Lab, fail, todo  # noqa: F401

# What the client sends, and the server prints after "message: ".
MESSAGE = b"hello through an address handle\0"
DATAGRAM_SECONDS = 10  # how long the server waits for it once the client has sent it


def post_receive(lab: Lab) -> None:
    """The server: a receive for one datagram. On UD the device writes the 40-byte GRH
    first, then the payload: the buffer must hold both."""
    sge = SGE(lab.mr.buf, GRH_BYTES + len(MESSAGE), lab.mr.lkey)
    lab.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[sge]))


def server_ah(lab: Lab) -> AH:
    """The client: an address handle for the server's port. On RoCE a packet is routed by
    GIDs, so the handle has the GRH: the server's GID and the index of this node's own."""
    # TODO 1: a GlobalRoute with dgid=lab.peer_gid(), sgid_index=lab.gid_index and
    # hop_limit=1, in an AHAttr(port_num=IB_PORT, is_global=1, gr=route); return
    # AH(lab.pd, attr=that AHAttr).
    todo("an address handle for the server (AH(pd, attr=AHAttr(...)))")


def post_datagram(lab: Lab, ah: AH) -> None:
    """The client: SEND the message to the server's QP through the address handle."""
    assert lab.peer is not None
    sge = SGE(lab.mr.buf, len(MESSAGE), lab.mr.lkey)
    wr = SendWR(wr_id=7, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge],  # noqa: F841 (TODO 2)
                send_flags=e.IBV_SEND_SIGNALED)
    # TODO 2: a UD send names its peer in the work request: wr.set_wr_ud(ah, the server's
    # QP number (lab.peer.qpn), LAB_QKEY); then post it on lab.qp.
    todo("name the server's QP in the work request (wr.set_wr_ud)")


def main() -> None:
    lab = Lab(e.IBV_ACCESS_LOCAL_WRITE, e.IBV_QPT_UD)
    if lab.is_server:
        post_receive(lab)  # before the client hears "ready"
    lab.connect()
    if lab.is_server:
        lab.expect_line("done")  # the client's send completed: the datagram is out
        # nothing acknowledges a datagram: one the device dropped never completes
        wc = lab.wait_completion(DATAGRAM_SECONDS)
        if wc.opcode != e.IBV_WC_RECV:
            fail("the completion is not a receive's")
        text = lab.mr.read(len(MESSAGE), GRH_BYTES).split(b"\0")[0]
        print(f"message: {text.decode(errors='replace')}")
    else:
        ah = server_ah(lab)
        lab.mr.write(MESSAGE, len(MESSAGE), 0)
        post_datagram(lab, ah)
        lab.wait_completion()
        lab.say("done")
        print(f"sent {len(MESSAGE)} bytes")


if __name__ == "__main__":
    main()
