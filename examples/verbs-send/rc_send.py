#!/usr/bin/env python3
"""rc_send.py: rc_send.c in Python on pyverbs (rdma-core's bindings, python3-pyverbs).

    server:  python3 rc_send.py -s [-d DEVICE] [-g GID_INDEX] [-p PORT] [-n BYTES]
    client:  python3 rc_send.py -c SERVER_IP [-d DEVICE] [-g GID_INDEX] [-p PORT] [-n BYTES]

Same options, same TCP exchange ("QPN:PSN:GID" lines, then "ready" and "done") and same
output ("received N bytes ok" / "sent N bytes ok") as the C program, so either side may be
either program. Written for rdma-lab's workbench (docs/workbench.md).
"""

from __future__ import annotations

import argparse
import random
import socket
import sys
import time
from typing import NoReturn

from pyverbs import enums as e
from pyverbs.addr import GID, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

MAX_BYTES = 16 << 20
WAIT_SECONDS = 30
IB_PORT = 1


def fail(what: str) -> NoReturn:
    print(f"rc_send.py: {what}", file=sys.stderr)
    sys.exit(1)


def pattern(size: int) -> bytes:
    return bytes(i % 251 for i in range(size))


def read_line(conn: socket.socket) -> str:
    line = b""
    while not line.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            fail("the peer closed the TCP connection")
        line += chunk
        if len(line) > 80:
            fail("the peer sent a line too long")
    return line[:-1].decode()


def peer_line(qpn: int, psn: int, gid: bytes) -> bytes:
    return f"{qpn:06x}:{psn:06x}:{gid.hex()}\n".encode()


def parse_peer(line: str) -> tuple[int, int, bytes]:
    try:
        qpn, psn, gid = line.split(":")
        raw = bytes.fromhex(gid)
        if len(raw) != 16:
            raise ValueError(gid)
        return int(qpn, 16), int(psn, 16), raw
    except ValueError:
        fail("the peer's QP line is not QPN:PSN:GID")


def wait_completion(cq: CQ) -> object:
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        count, wcs = cq.poll(1)
        if count:
            wc = wcs[0]
            if wc.status != e.IBV_WC_SUCCESS:
                fail(f"completion failed with status {wc.status}")
            return wc
        if time.monotonic() > deadline:
            fail(f"no completion within {WAIT_SECONDS} s")


def connect_qp(qp: QP, gid_index: int, mtu: int, peer: tuple[int, int, bytes],
               my_psn: int) -> None:
    qpn, psn, gid = peer
    words = gid.hex()
    route = GlobalRoute(dgid=GID(":".join(words[i:i + 4] for i in range(0, 32, 4))),
                        sgid_index=gid_index, hop_limit=1)
    attr = QPAttr(qp_state=e.IBV_QPS_RTR, port_num=IB_PORT, path_mtu=mtu)
    attr.dest_qp_num = qpn
    attr.rq_psn = psn
    attr.max_dest_rd_atomic = 1
    attr.min_rnr_timer = 12
    attr.ah_attr = AHAttr(port_num=IB_PORT, is_global=1, gr=route)
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN
              | e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    attr.qp_state = e.IBV_QPS_RTS
    attr.timeout = 14
    attr.retry_cnt = 7
    attr.rnr_retry = 7
    attr.sq_psn = my_psn
    attr.max_rd_atomic = 1
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT
              | e.IBV_QP_RNR_RETRY | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)


def tcp_connection(server_ip: str | None, port: int) -> socket.socket:
    if server_ip is not None:
        return socket.create_connection((server_ip, port))
    with socket.create_server(("0.0.0.0", port), reuse_port=False) as listener:
        conn, _ = listener.accept()
    return conn


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    side = p.add_mutually_exclusive_group(required=True)
    side.add_argument("-s", action="store_true", help="server")
    side.add_argument("-c", metavar="SERVER_IP", help="client of the server at SERVER_IP")
    p.add_argument("-d", metavar="DEVICE", help="RDMA device (default: the first)")
    p.add_argument("-g", metavar="GID_INDEX", type=int, default=1, help="GID index (RoCE v2)")
    p.add_argument("-p", metavar="PORT", type=int, default=18515, help="TCP port")
    p.add_argument("-n", metavar="BYTES", type=int, default=4096, help="message size")
    args = p.parse_args()
    if not 0 < args.n <= MAX_BYTES or not 0 <= args.g <= 255:
        p.error(f"-n must be 1 to {MAX_BYTES}, -g 0 to 255")

    devices = [d.name.decode() for d in get_device_list()]
    if not devices or (args.d and args.d not in devices):
        fail("no such RDMA device (see ibv_devices)" if args.d else "no RDMA device")
    ctx = Context(name=args.d or devices[0])
    port = ctx.query_port(IB_PORT)
    if port.state != e.IBV_PORT_ACTIVE:
        fail("the port is not ACTIVE")
    pd = PD(ctx)
    mr = MR(pd, args.n, e.IBV_ACCESS_LOCAL_WRITE)
    cq = CQ(ctx, 2, None, None, 0)
    cap = QPCap(max_send_wr=1, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    qp.modify(QPAttr(qp_state=e.IBV_QPS_INIT, port_num=IB_PORT),
              e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    sge = SGE(mr.buf, args.n, mr.lkey)
    if args.s:  # the receive is posted before the client can send
        qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[sge]))
    my_psn = random.getrandbits(24)
    my_gid = bytes.fromhex(str(ctx.query_gid(IB_PORT, args.g)).replace(":", ""))

    conn = tcp_connection(args.c, args.p)
    mine = peer_line(qp.qp_num, my_psn, my_gid)
    if args.s:
        peer = parse_peer(read_line(conn))
        conn.sendall(mine)
    else:
        conn.sendall(mine)
        peer = parse_peer(read_line(conn))
    connect_qp(qp, args.g, port.active_mtu, peer, my_psn)

    if args.s:
        conn.sendall(b"ready\n")
        wc = wait_completion(cq)
        if wc.opcode != e.IBV_WC_RECV or wc.byte_len != args.n:
            fail("the receive completed with a wrong opcode or length")
        if mr.read(args.n, 0) != pattern(args.n):
            fail("the received bytes differ from the pattern")
        print(f"received {args.n} bytes ok", flush=True)
        conn.sendall(b"done\n")
    else:
        if read_line(conn) != "ready":
            fail("the server did not say ready")
        mr.write(pattern(args.n), args.n, 0)
        qp.post_send(SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge],
                            send_flags=e.IBV_SEND_SIGNALED))
        wait_completion(cq)
        if read_line(conn) != "done":
            fail("the server did not confirm the receive")
        print(f"sent {args.n} bytes ok", flush=True)
    conn.close()


if __name__ == "__main__":
    main()
