#!/usr/bin/env python3
"""Lesson 8: connect with RDMA CM instead of exchanging QP numbers.

    node1: python3 lesson.py server [-p PORT]
    node2: python3 lesson.py client SERVER_IP [-p PORT]

Everything but the connection is written: the queue pair's attributes (qp_init), the
connection's (conn_param), the SEND and the receive. Fill in the two TODOs; `labctl lesson
check 8 --lang python` says what is still wrong."""

from __future__ import annotations

import argparse

import pyverbs.cm_enums as ce  # noqa: F401 (for the TODOs)
from pyverbs import enums as e
from pyverbs.cmid import CMID, AddrInfo, ConnParam  # noqa: F401 (for the TODOs)
from pyverbs.mr import MR
from pyverbs.qp import QPCap, QPInitAttr
from rdma_common import fail, pattern, print_digest, todo


def parse_args() -> argparse.Namespace:
    """server | client SERVER_IP [-d DEVICE] [-g GID_INDEX] [-p PORT] [-n BYTES]: RDMA CM
    picks the device and the GID from the IP address, so -d and -g are taken and not
    needed."""
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


def conn_param() -> ConnParam:
    """One READ or atomic in flight each way, retries as rdma_common's, and an RNR retry
    count that gives up rather than retrying for ever."""
    return ConnParam(resources=1, depth=1, retry=7, rnr_retry=6)


def cm_listen_and_accept(port: int, size: int) -> tuple[CMID, CMID, MR]:
    """The server: listen on the port, take the client's request, post a receive of `size`
    bytes on the connection's queue pair and accept: the listening id (kept for as long as
    the connection), the connection's id and the receive's memory."""
    # TODO 1: an AddrInfo for any address on the port (src="0.0.0.0",
    # src_service=str(port), port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE) and a CMID
    # made from it with qp_init_attr=qp_init() (rdma_create_ep); listen(); get_request()
    # gives the connection's id, with its queue pair. Then its memory (reg_msgs(size)),
    # the receive (post_recv(mr, size)) and accept(conn_param()).
    todo("listen for the client with RDMA CM (AddrInfo with RAI_PASSIVE, CMID, listen)")


def cm_connect(server_ip: str, port: int) -> CMID:
    """The client: the server's address and a route to it (rdma_getaddrinfo and
    rdma_create_ep resolve both), the queue pair on the id, then the connection."""
    # TODO 2: an AddrInfo of the server (dst=server_ip, dst_service=str(port),
    # port_space=ce.RDMA_PS_TCP) and a CMID made from it with qp_init_attr=qp_init(): it
    # resolves the address and the route (rdma_create_ep); then connect(conn_param()).
    todo("connect to the server with RDMA CM (AddrInfo, CMID, connect)")


def main() -> None:
    args = parse_args()
    if args.role == "server":
        _listener, conn, mr = cm_listen_and_accept(args.p, args.n)
        wc = conn.get_recv_comp()  # the client's SEND landed in the receive
        if wc is None or wc.status != e.IBV_WC_SUCCESS:
            fail(f"the receive completed with status {wc.status if wc else '?'}")
        print_digest(mr.read(args.n, 0))
    else:
        conn = cm_connect(args.server_ip, args.p)
        mr = conn.reg_msgs(args.n)
        mr.write(pattern(args.n), args.n, 0)
        conn.post_send(mr, e.IBV_SEND_SIGNALED, args.n)
        wc = conn.get_send_comp()
        if wc is None or wc.status != e.IBV_WC_SUCCESS:
            fail(f"the SEND completed with status {wc.status if wc else '?'}")
        print(f"sent {args.n} bytes", flush=True)
        conn.disconnect()


if __name__ == "__main__":
    main()
