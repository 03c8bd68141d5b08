"""RC pingpong on pyverbs, wire-compatible with rdma-core's ibv_rc_pingpong (runs in a node).

    python3 -m labctl.nodeside.pingpong [options]            server
    python3 -m labctl.nodeside.pingpong [options] HOST       client

Same options, output and out-of-band exchange as ibv_rc_pingpong of rdma-core 56.1
(libibverbs/examples/rc_pingpong.c + pingpong.c): TCP port 18515, each side sends a 52-byte
NUL-terminated "LID:QPN:PSN:GID" text (4, 6, 6 hex digits; the GID as 32 hex digits of its
raw bytes), the client writes first, the server moves its QP to RTR/RTS before it replies,
the client closes with "done\\0". A Python server therefore works with a C client and the
reverse.

`--tcp` runs a plain TCP socket ping-pong of the same message size instead (no pyverbs): the
baseline `labctl bench` compares RDMA against.

Imports are kept lean: pyverbs (seconds under emulation) is imported only once the options
are parsed, and only its modules the data path needs.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import sys
import time

RECV_WRID = 1
SEND_WRID = 2
MSG_SIZE = 52  # sizeof "0000:000000:000000:00000000000000000000000000000000"
MTUS = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}  # enum ibv_mtu
# ibv_wc_status_str()'s words for the statuses a lossy link ends a QP with (rc_pingpong.c
# prints "Failed status WORDS (N) for wr_id W").
WC_STATUS_WORDS = {5: "Work Request Flushed Error", 12: "transport retry counter exceeded",
                   13: "RNR retry counter exceeded"}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="pingpong", description=__doc__.splitlines()[0])
    p.add_argument("-p", "--port", type=int, default=18515,
                   help="listen on/connect to port (default 18515)")
    p.add_argument("-d", "--ib-dev", default=None, help="IB device (default first found)")
    p.add_argument("-i", "--ib-port", type=int, default=1, help="port of the IB device")
    p.add_argument("-s", "--size", type=int, default=4096, help="message size (default 4096)")
    p.add_argument("-m", "--mtu", type=int, default=1024, help="path MTU (default 1024)")
    p.add_argument("-r", "--rx-depth", type=int, default=500,
                   help="receives to post at a time (default 500)")
    p.add_argument("-n", "--iters", type=int, default=1000, help="exchanges (default 1000)")
    p.add_argument("-l", "--sl", type=int, default=0, help="service level")
    p.add_argument("-g", "--gid-idx", type=int, default=-1, help="local port GID index")
    # Not in ibv_rc_pingpong (it sets 14, 7, 7): for the fault lessons (docs/faults.md).
    p.add_argument("--ack-timeout", type=int, default=14,
                   help="local ACK timeout exponent: 4.096 us * 2^N (default 14; 0: none)")
    p.add_argument("--retry-cnt", type=int, default=7,
                   help="transport retries before IBV_WC_RETRY_EXC_ERR (default 7; rxe: "
                   "7 is forever)")
    p.add_argument("--rnr-retry", type=int, default=7,
                   help="RNR NAK retries before IBV_WC_RNR_RETRY_EXC_ERR (default 7: forever)")
    p.add_argument("--rnr-delay", type=float, default=0.0, metavar="SECONDS",
                   help="post the receives only SECONDS after the QP is connected: until "
                   "then the peer's SENDs get RNR NAKs (default 0: before, as usual)")
    p.add_argument("--tcp", action="store_true",
                   help="plain TCP socket ping-pong of the same size (no RDMA)")
    p.add_argument("servername", nargs="?", default=None)
    args = p.parse_args(argv)
    if (args.mtu not in MTUS or not 0 <= args.port <= 65535 or args.ib_port < 1
            or not 0 <= args.ack_timeout <= 31 or not 0 <= args.retry_cnt <= 7
            or not 0 <= args.rnr_retry <= 7 or not 0 <= args.rnr_delay <= 3600):
        p.print_usage(sys.stdout)
        sys.exit(1)
    return args


# --- out-of-band exchange (text identical to pingpong.c) -----------------------------------
def wire_message(lid: int, qpn: int, psn: int, gid: bytes) -> bytes:
    text = f"{lid:04x}:{qpn:06x}:{psn:06x}:{gid.hex()}"
    return text.encode() + b"\0"


def parse_wire(msg: bytes) -> tuple[int, int, int, bytes]:
    text = msg.split(b"\0", 1)[0].decode()
    lid, qpn, psn, gid = text.split(":")
    return int(lid, 16), int(qpn, 16), int(psn, 16), bytes.fromhex(gid)


def recv_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def connect(servername: str, port: int) -> socket.socket:
    for family, kind, proto, _, addr in socket.getaddrinfo(servername, port,
                                                           type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.connect(addr)
            return sock
        except OSError:
            sock.close()
    raise OSError(f"Couldn't connect to {servername}:{port}")


def accept(port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    listener.bind(("::", port))
    listener.listen(1)
    conn, _ = listener.accept()
    listener.close()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def gid_text(gid: bytes) -> str:
    return socket.inet_ntop(socket.AF_INET6, gid)


def report(size: int, iters: int, seconds: float) -> None:
    usec = seconds * 1e6
    nbytes = size * iters * 2
    print(f"{nbytes} bytes in {usec / 1e6:.2f} seconds = {nbytes * 8.0 / usec:.2f} Mbit/sec")
    print(f"{iters} iters in {usec / 1e6:.2f} seconds = {usec / iters:.2f} usec/iter")


# --- TCP baseline -------------------------------------------------------------------------
def tcp_pingpong(args: argparse.Namespace) -> int:
    """Client sends `size` bytes, server echoes them; `iters` round trips, timed likewise."""
    if args.servername:
        conn = connect(args.servername, args.port)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    else:
        conn = accept(args.port)
    buf = bytearray(b"\x7b" * args.size)
    view = memoryview(buf)
    size = args.size

    def receive() -> bool:
        got = 0
        while got < size:
            n = conn.recv_into(view[got:], size - got)
            if n == 0:
                return False
            got += n
        return True

    start = time.monotonic()
    for _ in range(args.iters):
        if args.servername:
            conn.sendall(buf)
            if not receive():
                print("connection closed by peer", file=sys.stderr)
                return 1
        else:
            if not receive():
                print("connection closed by peer", file=sys.stderr)
                return 1
            conn.sendall(buf)
    elapsed = time.monotonic() - start
    conn.close()
    report(size, args.iters, elapsed)
    return 0


# --- RDMA RC pingpong ---------------------------------------------------------------------
class PingPong:
    """The pingpong_context of rc_pingpong.c on pyverbs objects."""

    def __init__(self, args: argparse.Namespace) -> None:
        from pyverbs import enums as e
        from pyverbs.cq import CQ
        from pyverbs.device import Context, get_device_list
        from pyverbs.mr import MR
        from pyverbs.pd import PD
        from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
        from pyverbs.wr import SGE, RecvWR, SendWR

        self.e = e
        self.args = args
        self.size = args.size
        self.rx_depth = args.rx_depth
        name = args.ib_dev
        if name is None:
            devices = get_device_list()
            if not devices:
                raise SystemExit("No IB devices found")
            name = devices[0].name.decode()
        try:
            self.ctx = Context(name=name)
        except Exception as exc:
            raise SystemExit(f"IB device {name} not found ({exc})") from None
        self.pd = PD(self.ctx)
        self.mr = MR(self.pd, args.size, e.IBV_ACCESS_LOCAL_WRITE)
        self.mr.write(b"\x7b" * args.size, args.size)
        self.cq = CQ(self.ctx, args.rx_depth + 1, None, None, 0)
        cap = QPCap(max_send_wr=1, max_recv_wr=args.rx_depth, max_send_sge=1, max_recv_sge=1)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap,
                          sq_sig_all=0)
        self.qp = QP(self.pd, init)
        send_flags = e.IBV_SEND_SIGNALED
        _, queried = self.qp.query(e.IBV_QP_CAP)
        if queried.max_inline_data >= args.size:
            send_flags |= e.IBV_SEND_INLINE
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=args.ib_port)
        attr.pkey_index = 0
        attr.qp_access_flags = 0
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
                       | e.IBV_QP_ACCESS_FLAGS)
        sge = SGE(self.mr.buf, args.size, self.mr.lkey)
        self.recv_wr = RecvWR(wr_id=RECV_WRID, num_sge=1, sg=[sge])
        self.send_wr = SendWR(wr_id=SEND_WRID, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge],
                              send_flags=send_flags)
        self.pending = 0

    def post_recv(self, n: int) -> int:
        for i in range(n):
            try:
                self.qp.post_recv(self.recv_wr)
            except Exception:
                return i
        return n

    def local_dest(self) -> tuple[int, int, int, bytes]:
        e = self.e
        port = self.ctx.query_port(self.args.ib_port)
        if port.link_layer != e.IBV_LINK_LAYER_ETHERNET and not port.lid:
            raise SystemExit("Couldn't get local LID")
        gid = bytes(16)
        if self.args.gid_idx >= 0:
            gid = bytes.fromhex(str(self.ctx.query_gid(self.args.ib_port,
                                                       self.args.gid_idx)).replace(":", ""))
        psn = random.getrandbits(24)
        return port.lid, self.qp.qp_num, psn, gid

    def connect(self, my_psn: int, dest: tuple[int, int, int, bytes]) -> None:
        from pyverbs.addr import GID, AHAttr, GlobalRoute
        from pyverbs.qp import QPAttr

        e = self.e
        lid, qpn, psn, gid = dest
        attr = QPAttr(qp_state=e.IBV_QPS_RTR, port_num=self.args.ib_port,
                      path_mtu=MTUS[self.args.mtu])
        attr.dest_qp_num = qpn
        attr.rq_psn = psn
        attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer = 12
        if any(gid[8:]):  # interface_id set: a global route (RoCE)
            words = gid.hex()
            dgid = GID(":".join(words[i:i + 4] for i in range(0, 32, 4)))
            route = GlobalRoute(dgid=dgid, sgid_index=self.args.gid_idx, hop_limit=1)
            ah = AHAttr(dlid=lid, sl=self.args.sl, port_num=self.args.ib_port, is_global=1,
                        gr=route)
        else:
            ah = AHAttr(dlid=lid, sl=self.args.sl, port_num=self.args.ib_port)
        attr.ah_attr = ah
        try:
            self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU
                           | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
                           | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
        except Exception:
            raise SystemExit("Failed to modify QP to RTR") from None
        attr.qp_state = e.IBV_QPS_RTS
        attr.timeout = self.args.ack_timeout
        attr.retry_cnt = self.args.retry_cnt
        attr.rnr_retry = self.args.rnr_retry
        attr.sq_psn = my_psn
        attr.max_rd_atomic = 1
        try:
            self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT
                           | e.IBV_QP_RNR_RETRY | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)
        except Exception:
            raise SystemExit("Failed to modify QP to RTS") from None

    def run(self, is_client: bool, iters: int, routs: int) -> float:
        """The completion loop of rc_pingpong.c (poll mode); returns elapsed seconds."""
        success = self.e.IBV_WC_SUCCESS
        poll = self.cq.poll
        post_send = self.qp.post_send
        send_wr = self.send_wr
        self.pending = RECV_WRID
        if is_client:
            post_send(send_wr)
            self.pending |= SEND_WRID
        start = time.monotonic()
        rcnt = scnt = 0
        while rcnt < iters or scnt < iters:
            ne, wcs = poll(2)
            if ne == 0:
                continue
            for wc in wcs:
                if wc.status != success:
                    words = WC_STATUS_WORDS.get(wc.status, "error")
                    raise SystemExit(f"Failed status {words} ({wc.status}) "
                                     f"for wr_id {wc.wr_id}")
                wr_id = wc.wr_id
                if wr_id == SEND_WRID:
                    scnt += 1
                elif wr_id == RECV_WRID:
                    routs -= 1
                    if routs <= 1:
                        routs += self.post_recv(self.rx_depth - routs)
                        if routs < self.rx_depth:
                            raise SystemExit(f"Couldn't post receive ({routs})")
                    rcnt += 1
                else:
                    raise SystemExit(f"Completion for unknown wr_id {wr_id}")
                self.pending &= ~wr_id
                if scnt < iters and not self.pending:
                    post_send(send_wr)
                    self.pending = RECV_WRID | SEND_WRID
        return time.monotonic() - start

    def close(self) -> None:
        for obj in (self.qp, self.cq, self.mr, self.pd, self.ctx):
            obj.close()


def post_receives(pp: PingPong) -> int:
    """rx_depth receives, or 0 after printing why not."""
    routs = pp.post_recv(pp.rx_depth)
    if routs < pp.rx_depth:
        print(f"Couldn't post receive ({routs})", file=sys.stderr)
        return 0
    return routs


def rc_pingpong(args: argparse.Namespace) -> int:
    pp = PingPong(args)
    routs = 0
    if not args.rnr_delay:
        routs = post_receives(pp)
        if not routs:
            return 1
    my = pp.local_dest()
    lid, qpn, psn, gid = my
    print(f"  local address:  LID 0x{lid:04x}, QPN 0x{qpn:06x}, PSN 0x{psn:06x}, "
          f"GID {gid_text(gid)}", flush=True)
    msg = wire_message(*my)
    if args.servername:
        try:
            conn = connect(args.servername, args.port)
        except OSError as exc:
            print(exc, file=sys.stderr)
            return 1
        with conn:
            conn.sendall(msg)
            reply = recv_exact(conn, MSG_SIZE)
            if len(reply) != MSG_SIZE:
                print("Couldn't read/write remote address", file=sys.stderr)
                return 1
            conn.sendall(b"done\0")
        remote = parse_wire(reply)
    else:
        conn = accept(args.port)
        with conn:
            request = recv_exact(conn, MSG_SIZE)
            if len(request) != MSG_SIZE:
                print(f"{len(request)}/{MSG_SIZE}: Couldn't read remote address",
                      file=sys.stderr)
                return 1
            remote = parse_wire(request)
            pp.connect(psn, remote)
            conn.sendall(msg)
            if len(recv_exact(conn, 5)) != 5:
                print("Couldn't send/recv local address", file=sys.stderr)
                return 1
    rlid, rqpn, rpsn, rgid = remote
    print(f"  remote address: LID 0x{rlid:04x}, QPN 0x{rqpn:06x}, PSN 0x{rpsn:06x}, "
          f"GID {gid_text(rgid)}", flush=True)
    if args.servername:
        pp.connect(psn, remote)
    if args.rnr_delay:  # connected, nothing to receive into: the RNR lesson (docs/faults.md)
        print(f"  posting receives in {args.rnr_delay:g} s", flush=True)
        time.sleep(args.rnr_delay)
        routs = post_receives(pp)
        if not routs:
            return 1
    elapsed = pp.run(bool(args.servername), args.iters, routs)
    report(args.size, args.iters, elapsed)
    pp.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    random.seed(os.getpid() * time.time())
    if args.tcp:
        return tcp_pingpong(args)
    return rc_pingpong(args)


if __name__ == "__main__":
    sys.exit(main())
