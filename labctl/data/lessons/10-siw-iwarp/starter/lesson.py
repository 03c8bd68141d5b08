#!/usr/bin/env python3
"""Lesson 10: the same program on siw (iWARP over TCP): what changes.

    node1: python3 lesson.py server [-p PORT]
    node2: python3 lesson.py client SERVER_IP [-p PORT]

Lesson 8's RDMA CM program, with lesson 5's one-sided WRITE that tells the server with an
immediate: it works on rxe. Make it work on siw: the TODO says where; `labctl lesson check
10 --lang python` says what is still wrong."""

from __future__ import annotations

import argparse
import struct

import pyverbs.cm_enums as ce
from pyverbs import enums as e
from pyverbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam
from pyverbs.mr import MR
from pyverbs.qp import QPCap, QPInitAttr
from rdma_common import fail, pattern, print_digest, todo

RESOLVE_MS = 5000  # resolve_addr's and resolve_route's own bound
NOTE_BYTES = 16  # the "done" the client SENDs, received by the server
BUFFER_KEY = struct.Struct("!QI")  # the accept's private data: the buffer's address, rkey


def parse_args() -> argparse.Namespace:
    """server | client SERVER_IP [-d DEVICE] [-g GID_INDEX] [-p PORT] [-n BYTES]: RDMA CM
    picks the device from the IP address, so -d and -g are taken and not needed."""
    p = argparse.ArgumentParser(prog="lesson")
    p.add_argument("role", choices=("server", "client"))
    p.add_argument("server_ip", nargs="?")
    p.add_argument("-d", metavar="DEVICE")
    p.add_argument("-g", metavar="GID_INDEX", type=int)
    p.add_argument("-p", metavar="PORT", type=int, default=18515)
    p.add_argument("-n", metavar="BYTES", type=int, default=4096)
    args = p.parse_args()
    if (args.role == "client") != (args.server_ip is not None):
        p.error("the client needs SERVER_IP, the server takes none")
    if not 0 < args.n <= 1 << 20 or not 0 < args.p < 65536:
        p.error("-n must be 1 to 1048576, -p a port")
    return args


def qp_init() -> QPInitAttr:
    """The RC queue pair RDMA CM makes with the id (its CQs too: none given here)."""
    cap = QPCap(max_send_wr=2, max_recv_wr=2, max_send_sge=1, max_recv_sge=1)
    return QPInitAttr(qp_type=e.IBV_QPT_RC, cap=cap)


def conn_param(private_data: bytes = b"") -> ConnParam:
    """One READ in flight each way, retries as rdma_common's, an RNR retry count that gives
    up; `private_data` goes to the peer with the accept (on iWARP in the MPA reply)."""
    param = ConnParam(resources=1, depth=1, retry=7, rnr_retry=6,
                      data_len=len(private_data))
    param.set_private_data(private_data)
    return param


def next_event(channel: CMEventChannel, want: int) -> bytes:
    """The next RDMA CM event, which must be `want`: its private data."""
    event = CMEvent(channel)
    if event.event_type != want:
        fail(f"RDMA CM said {event.event_str()}, not the event {want}")
    data = event.private_data
    event.ack_cm_event()
    return bytes(data)


def serve(port: int, size: int) -> None:
    """The server: a buffer the peer may write into, its address and rkey in the accept's
    private data, a receive for the client's "done"; then the digest of the buffer."""
    passive = AddrInfo(src="0.0.0.0", src_service=str(port), port_space=ce.RDMA_PS_TCP,
                       flags=ce.RAI_PASSIVE)
    listener = CMID(creator=passive, qp_init_attr=qp_init())
    listener.listen()
    conn = listener.get_request()
    buffer = MR(conn, size, e.IBV_ACCESS_REMOTE_WRITE)  # rdma_reg_write: LOCAL and REMOTE
    note = conn.reg_msgs(NOTE_BYTES)
    conn.post_recv(note, NOTE_BYTES)
    conn.accept(conn_param(BUFFER_KEY.pack(buffer.buf, buffer.rkey)))
    wc = conn.get_recv_comp()  # the client's word: its WRITE came before it
    if wc is None or wc.status != e.IBV_WC_SUCCESS:
        fail(f"the receive completed with status {wc.status if wc else '?'}")
    print_digest(buffer.read(size, 0))


def write_then_send(conn: CMID, data: MR, note: MR, size: int, addr: int, rkey: int) -> None:
    """The client: the whole buffer into the server's, and word to the server that it is
    done."""
    # TODO: on rxe one RDMA WRITE with immediate data would do it (it consumes the
    # server's receive; pyverbs' CMID has no call for it anyway). iWARP has no immediate
    # data: siw refuses IBV_WR_RDMA_WRITE_WITH_IMM. Post the WRITE
    # (conn.post_write(data, size, addr, rkey, 0)) and after it a SEND of the note's 4
    # bytes ("done": conn.post_send(note, e.IBV_SEND_SIGNALED, 4)): the queue pair
    # delivers them in order, so when the SEND's receive completes on the server the
    # WRITE's bytes are in its buffer.
    todo("RDMA WRITE the buffer, then SEND the note (iWARP has no immediate data)")


def write(server_ip: str, port: int, size: int) -> None:
    """The client: connect (the event channel shows the accept's private data), write."""
    channel = CMEventChannel()
    conn = CMID(creator=channel, port_space=ce.RDMA_PS_TCP)
    conn.resolve_addr(AddrInfo(dst=server_ip, dst_service=str(port),
                               port_space=ce.RDMA_PS_TCP), RESOLVE_MS)
    next_event(channel, ce.RDMA_CM_EVENT_ADDR_RESOLVED)
    conn.resolve_route(RESOLVE_MS)
    next_event(channel, ce.RDMA_CM_EVENT_ROUTE_RESOLVED)
    conn.create_qp(qp_init())
    conn.connect(conn_param())
    key = next_event(channel, ce.RDMA_CM_EVENT_ESTABLISHED)
    if len(key) < BUFFER_KEY.size:
        fail("the server's accept carried no buffer address and rkey")
    addr, rkey = BUFFER_KEY.unpack(key[:BUFFER_KEY.size])
    data, note = conn.reg_msgs(size), conn.reg_msgs(NOTE_BYTES)
    data.write(pattern(size), size, 0)
    note.write(b"done", 4, 0)
    write_then_send(conn, data, note, size, addr, rkey)
    wc = conn.get_send_comp()
    if wc is None or wc.status != e.IBV_WC_SUCCESS:
        fail(f"the SEND completed with status {wc.status if wc else '?'}")
    print(f"wrote {size} bytes", flush=True)
    conn.disconnect()


def main() -> None:
    args = parse_args()
    if args.role == "server":
        serve(args.p, args.n)
    else:
        write(args.server_ip, args.p, args.n)


if __name__ == "__main__":
    main()
