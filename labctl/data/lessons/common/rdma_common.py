"""rdma_common.py: what every two-node lesson program shares (rdma_common.c in Python, on
pyverbs), so that a lesson's own file holds only the step the lesson teaches.

Same command line (server | client SERVER_IP [-d DEVICE] [-g GID_INDEX] [-p PORT]
[-n BYTES]), same TCP lines ("QPN:PSN:GID:ADDR:RKEY", "ready", "done") and same output
as the C programs, so either side may be either language."""

from __future__ import annotations

import argparse
import random
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any, NoReturn

from pyverbs import enums as e
from pyverbs.addr import GID, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

IB_PORT = 1
LAB_QKEY = 0x11111111  # the lessons' UD QPs take a datagram only with this Q_Key
GRH_BYTES = 40  # a UD receive starts with the Global Route Header, before the payload
MAX_BYTES = 1 << 20
WAIT_SECONDS = 30
# ibv_wc_status_str()'s words for the statuses a lesson meets, so that both languages
# print the same line: "a work request completed with transport retry counter exceeded".
_WC_STATUS = {1: "local length error", 2: "local QP operation error",
              4: "local protection error", 5: "Work Request Flushed Error",
              7: "bad response error", 8: "local access error",
              9: "remote invalid request error", 10: "remote access error",
              11: "remote operation error", 12: "transport retry counter exceeded",
              13: "RNR retry counter exceeded"}


def _wc_status(status: int) -> str:
    return _WC_STATUS.get(status, f"status {status}")


def fail(what: str) -> NoReturn:
    print(f"lesson: {what}", file=sys.stderr)
    sys.exit(1)


def todo(what: str) -> NoReturn:
    """A starter's unwritten step."""
    print(f"TODO: {what}", file=sys.stderr)
    sys.exit(1)


def pattern(size: int) -> bytes:
    return bytes(i % 251 for i in range(size))


def print_digest(data: bytes) -> None:
    """'buffer N bytes fnv1a64 HEX': what the server's buffer holds at the end."""
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    print(f"buffer {len(data)} bytes fnv1a64 {value:016x}", flush=True)


def open_device(name: str | None) -> tuple[str, Context]:
    """The device called `name` (else the first), opened: its name and its context."""
    devices = [d.name.decode() for d in get_device_list()]
    if not devices or (name and name not in devices):
        fail("no such RDMA device (see ibv_devices)" if name else "no RDMA device")
    chosen = name or devices[0]
    return chosen, Context(name=chosen)


@dataclass
class Peer:
    qpn: int
    psn: int
    gid: bytes
    addr: int  # the peer's buffer: where a one-sided operation goes
    rkey: int  # and the key that lets it


class Lab:
    """Device, PD, CQ, a registered buffer and an RC QP in INIT (or a UD one, Q_Key
    LAB_QKEY, with `qp_type=e.IBV_QPT_UD`); connect() does the rest."""

    def __init__(self, access: int, qp_type: int = e.IBV_QPT_RC) -> None:
        p = argparse.ArgumentParser(prog="lesson")
        p.add_argument("role", choices=("server", "client"))
        p.add_argument("server_ip", nargs="?")
        p.add_argument("-d", metavar="DEVICE")
        p.add_argument("-g", metavar="GID_INDEX", type=int, default=1)
        p.add_argument("-p", metavar="PORT", type=int, default=18515)
        p.add_argument("-n", metavar="BYTES", type=int, default=4096)
        args = p.parse_args()
        if (args.role == "client") != (args.server_ip is not None):
            p.error("the client needs SERVER_IP, the server takes none")
        if not 0 < args.n <= MAX_BYTES or not 0 <= args.g <= 255:
            p.error(f"-n must be 1 to {MAX_BYTES}, -g 0 to 255")
        self.is_server = args.role == "server"
        self.server_ip, self.port_number = args.server_ip, args.p
        self.gid_index, self.bytes = args.g, args.n
        # An RC QP's retransmission, set in RTS: wait 4.096 us * 2^timeout for an ACK,
        # then send again, at most retry_cnt times (lesson 9 sets its own).
        self.timeout, self.retry_cnt = 14, 7
        _, self.ctx = open_device(args.d)
        self.port = self.ctx.query_port(IB_PORT)
        if self.port.state != e.IBV_PORT_ACTIVE:
            fail("the port is not ACTIVE")
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 4, None, None, 0)
        self.mr = MR(self.pd, self.bytes, access)
        cap = QPCap(max_send_wr=2, max_recv_wr=2, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(self.pd, QPInitAttr(qp_type=qp_type, scq=self.cq, rcq=self.cq,
                                         cap=cap))
        self.is_ud = qp_type == e.IBV_QPT_UD
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=IB_PORT)
        attr.qp_access_flags = access & ~e.IBV_ACCESS_LOCAL_WRITE
        attr.qkey = LAB_QKEY
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
                       | (e.IBV_QP_QKEY if self.is_ud else e.IBV_QP_ACCESS_FLAGS))
        self.conn: socket.socket | None = None
        self.peer: Peer | None = None

    def say(self, line: str) -> None:
        assert self.conn is not None
        self.conn.sendall(line.encode() + b"\n")

    def read_line(self) -> str:
        assert self.conn is not None
        line = b""
        while not line.endswith(b"\n"):
            chunk = self.conn.recv(1)
            if not chunk:
                fail("the peer closed the TCP connection")
            line += chunk
            if len(line) > 128:
                fail("the peer sent a line too long")
        return line[:-1].decode(errors="replace")

    def expect_line(self, line: str) -> None:
        got = self.read_line()
        if got != line:
            fail(f'the peer said "{got}", not "{line}"')

    def connect(self) -> None:
        """Swap QP lines with the peer, connect the QP (RTR, RTS); the server then says
        "ready" and the client waits for it."""
        psn = random.getrandbits(24)
        gid = bytes.fromhex(str(self.ctx.query_gid(IB_PORT, self.gid_index)).replace(":", ""))
        mine = f"{self.qp.qp_num:06x}:{psn:06x}:{gid.hex()}:{self.mr.buf:016x}:{self.mr.rkey:08x}"
        if self.is_server:
            with socket.create_server(("0.0.0.0", self.port_number)) as listener:
                self.conn, _ = listener.accept()
            self.peer = self._parse(self.read_line())
            self.say(mine)
        else:
            self.conn = socket.create_connection((self.server_ip, self.port_number))
            self.say(mine)
            self.peer = self._parse(self.read_line())
        if self.is_ud:
            self._ud_ready(psn)
        else:
            self._rc_ready(psn)
        if self.is_server:
            self.say("ready")
        else:
            self.expect_line("ready")

    def peer_gid(self) -> GID:
        """The peer's GID, as pyverbs takes it."""
        assert self.peer is not None
        words = self.peer.gid.hex()
        return GID(":".join(words[i:i + 4] for i in range(0, 32, 4)))

    def _ud_ready(self, psn: int) -> None:
        """A UD QP: RTR and RTS with no peer in them; each send names its own (an address
        handle, the remote QPN and Q_Key)."""
        attr = QPAttr(qp_state=e.IBV_QPS_RTR)
        self.qp.modify(attr, e.IBV_QP_STATE)
        attr.qp_state = e.IBV_QPS_RTS
        attr.sq_psn = psn
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN)

    def _rc_ready(self, psn: int) -> None:
        """An RC QP: connected to the peer's in RTR, able to send in RTS."""
        assert self.peer is not None
        route = GlobalRoute(dgid=self.peer_gid(), sgid_index=self.gid_index, hop_limit=1)
        attr = QPAttr(qp_state=e.IBV_QPS_RTR, port_num=IB_PORT, path_mtu=self.port.active_mtu)
        attr.dest_qp_num = self.peer.qpn
        attr.rq_psn = self.peer.psn
        attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer = 12
        attr.ah_attr = AHAttr(port_num=IB_PORT, is_global=1, gr=route)
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU
                       | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC
                       | e.IBV_QP_MIN_RNR_TIMER)
        attr.qp_state = e.IBV_QPS_RTS
        # rnr_retry 7 would retry for ever: a SEND nobody posted a receive for must fail
        attr.timeout, attr.retry_cnt, attr.rnr_retry = self.timeout, self.retry_cnt, 6
        attr.sq_psn = psn
        attr.max_rd_atomic = 1
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT
                       | e.IBV_QP_RNR_RETRY | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)

    @staticmethod
    def _parse(line: str) -> Peer:
        try:
            qpn, psn, gid, addr, rkey = line.split(":")
            raw = bytes.fromhex(gid)
            if len(raw) != 16:
                raise ValueError(gid)
            return Peer(int(qpn, 16), int(psn, 16), raw, int(addr, 16), int(rkey, 16))
        except ValueError:
            fail("the peer's line is not QPN:PSN:GID:ADDR:RKEY")

    def wait_completion(self, seconds: int = WAIT_SECONDS) -> Any:
        deadline = time.monotonic() + seconds
        while True:
            count, wcs = self.cq.poll(1)
            if count:
                wc = wcs[0]
                if wc.status != e.IBV_WC_SUCCESS:
                    fail(f"a work request completed with {_wc_status(wc.status)}")
                return wc
            if time.monotonic() > deadline:
                fail(f"no completion within {seconds} s")
