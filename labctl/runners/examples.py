"""The example catalogue: each entry is a spec; adding one is a few lines."""

from __future__ import annotations

import shlex

from labctl.lab.handle import LabHandle
from labctl.runners.example_spec import ExampleSpec, RunContext
from labctl.runners.fabric import FABRIC
from labctl.runners.parsers import (
    parse_cmatose,
    parse_cmtime,
    parse_mckey,
    parse_perftest,
    parse_pingpong,
    parse_rcopy,
    parse_rdma_server,
    parse_rping,
    parse_rstream,
)
from labctl.runners.probes import CM_LISTEN, group_joined_probe, listening_probe
from labctl.runners.qperf import QPERF

PINGPONG_PORT = 18515
PERFTEST_PORT = 18515
MCKEY_GROUP = "239.1.1.1"

RDMA_DEVICES = frozenset({"rxe", "siw"})
ROCE_ONLY = frozenset({"rxe"})
NO_VERBS_PINGPONG_ON_IWARP = ("iWARP (siw) supports RC through RDMA CM only; the verbs "
                              "pingpongs set up QPs without RDMA CM")


# The mckey receiver is shell text run as root in the node (the ready probes are in
# probes.py): every value in it is an int made here or passes through shlex.quote (values
# are also checked before a run, see spec.check_options).
def recvs_counter(device: str) -> str:
    """Print the rxe device's count of receive completions."""
    stat = shlex.join(["rdma", "statistic", "show", "link", f"{device}/1"])
    return stat + " | awk '$1 == \"rdma_recvs\" {print $2}'"


def _pingpong_args(ctx: RunContext, side: str, transport: str) -> list[str]:
    endpoint = ctx.server if side == "server" else ctx.client
    args = ["-d", endpoint.device, "-i", "1"]
    if endpoint.gid_index is not None:
        args += ["-g", str(endpoint.gid_index)]  # RoCE: a zero GID makes RTR fail
    # UD messages must fit one MTU (rxe's active MTU is 1024 on a 1500-byte link).
    defaults = {"size": 512} if transport == "ud" else {}
    for option, flag in (("size", "-s"), ("iters", "-n"), ("mtu", "-m"), ("rx_depth", "-r")):
        if option == "mtu" and transport == "ud":
            continue  # ibv_ud_pingpong has no -m
        value = ctx.opt(option, defaults.get(option))
        if value is not None:
            args += [flag, str(value)]
    if ctx.opt("port") is not None:
        args += ["-p", str(ctx.opt("port"))]
    return args


# --- Python RC pingpong (labctl/nodeside/pingpong.py), alone and against the C one ---------
IMPLS = ("c", "python")


def pingpong_variant(server_impl: str, client_impl: str) -> str:
    """rc (C/C), rc-py (Python/Python), rc-py-c (Python server, C client), rc-c-py."""
    if (server_impl, client_impl) == ("c", "c"):
        return "rc"
    if (server_impl, client_impl) == ("python", "python"):
        return "rc-py"
    return f"rc-{server_impl[:2]}-{client_impl[:2]}"


# rxe posts a receive's completion before it sends the ACK (do_complete, then acknowledge,
# in rxe_resp.c): a client that exits on its last completion can destroy its QP before the
# ACK of the server's last SEND leaves, and the server resends it forever (retry count 7 is
# unlimited on rxe). UC and UD have no ACKs, so a stall there is final.
LAST_ACK_RACE = ("the client exited on its last completion before rxe acknowledged the "
                 "server's last SEND, which the server resends forever: docs/reliability.md")


def _pingpong(transport: str, server_impl: str = "c", client_impl: str = "c") -> ExampleSpec:
    """A verbs pingpong: the C programs for every transport, or RC with Python on a side."""

    def program(impl: str) -> list[str]:
        if impl == "python":
            return LabHandle.node_python("labctl.nodeside.pingpong")
        return [f"ibv_{transport}_pingpong"]

    return ExampleSpec(
        name="pingpong",
        variant=transport if transport != "rc" else pingpong_variant(server_impl, client_impl),
        server_argv=lambda ctx: [*program(server_impl),
                                 *_pingpong_args(ctx, "server", transport)],
        client_argv=lambda ctx: [*program(client_impl),
                                 *_pingpong_args(ctx, "client", transport), ctx.server.address],
        parse=parse_pingpong,
        parse_server=parse_pingpong,
        devices=ROCE_ONLY,
        unsupported_reason=NO_VERBS_PINGPONG_ON_IWARP,
        ready_probe=lambda ctx: listening_probe(ctx.opt("port", PINGPONG_PORT)),
        key_figure="usec_per_iter",
        server_stall_race=LAST_ACK_RACE if transport in ("rc", "srq") else "",
    )


# --- connection setup failures (ExampleSpec.setup_failed) ---------------------------------
# What each RDMA CM client prints when its connect fails, as seen in a siw-pair lab
# (rdma-core 56.1) with the server stopped after it listened (siw's initiator gives up after
# 10 s without the MPA reply) and with no server at all (refused). riostream's
# "rpoll: Invalid argument" is a CI run's (docs/reliability.md item 13).
RPING_SETUP_FAILED = ("wait for CONNECTED state", "rdma_connect: ")
UCMATOSE_SETUP_FAILED = ("cmatose: failure connecting", "cmatose: event: RDMA_CM_EVENT_UNREACHABLE",
                         "cmatose: event: RDMA_CM_EVENT_REJECTED",
                         "cmatose: event: RDMA_CM_EVENT_CONNECT_ERROR")
RDMA_CLIENT_SETUP_FAILED = ("rdma_connect: ",)
RSTREAM_SETUP_FAILED = ("rpoll: ", "rconnect: ", "async rconnect: ")  # client_connect()
RCOPY_SETUP_FAILED = ("rconnect failed",)


# --- rping (librdmacm) ---------------------------------------------------------------------
def _rping_args(ctx: RunContext) -> list[str]:
    args = ["-a", ctx.server.address, "-C", str(ctx.opt("count", 10))]
    if ctx.opt("size") is not None:
        args += ["-S", str(ctx.opt("size"))]
    if ctx.opt("port") is not None:
        args += ["-p", str(ctx.opt("port"))]
    if ctx.opt("verbose", True):
        args.append("-v")  # one line per ping: what the parser counts
    return args


RPING = ExampleSpec(
    name="rping",
    variant="rc",
    server_argv=lambda ctx: ["rping", "-s", *_rping_args(ctx)],
    client_argv=lambda ctx: ["rping", "-c", *_rping_args(ctx)],
    parse=parse_rping,
    parse_server=parse_rping,
    devices=RDMA_DEVICES,
    ready_probe=lambda ctx: CM_LISTEN,
    setup_failed=RPING_SETUP_FAILED,
    key_figure="pings",
    timeout=90.0,
)


# --- perftest ------------------------------------------------------------------------------
PERFTESTS = ("ib_send_lat", "ib_write_lat", "ib_read_lat", "ib_send_bw", "ib_write_bw",
             "ib_read_bw")


def perftest_uses_cm(ctx: RunContext) -> bool:
    """siw (iWARP) needs RDMA CM (-R); on rxe it is optional (--rdma-cm)."""
    return ctx.server.device_type == "siw" or bool(ctx.opt("rdma_cm", False))


def _perftest_args(ctx: RunContext, side: str, atomic: bool = False) -> list[str]:
    endpoint = ctx.server if side == "server" else ctx.client
    args = ["-d", endpoint.device, "-i", "1", "-F", "-n", str(ctx.opt("iters", 100))]
    if perftest_uses_cm(ctx):
        args.append("-R")
    elif endpoint.gid_index is not None:
        args += ["-x", str(endpoint.gid_index)]  # reproducible RoCE v2 GID
    if ctx.opt("size") is not None and not atomic:  # an atomic is 8 bytes, always
        args += ["-s", str(ctx.opt("size"))]
    if ctx.opt("port") is not None:
        args += ["-p", str(ctx.opt("port"))]
    return args


def _perftest(test: str) -> ExampleSpec:
    atomic = "atomic" in test
    return ExampleSpec(
        name="perftest",
        variant=test,
        # with -R; see example_spec.py. The second is siw's (iWARP) refusal, as perftest prints it.
        setup_failed=("Event: RDMA_CM_EVENT_REJECTED; error: 8",
                        "ERRNO: Connection refused."),
        # perftest's header rule comes first once connected (with -R: after RDMA CM's connect)
        connected_marker="-" * 40,
        server_argv=lambda ctx: [test, *_perftest_args(ctx, "server", atomic)],
        client_argv=lambda ctx: [test, *_perftest_args(ctx, "client", atomic),
                                 ctx.server.address],
        parse=parse_perftest,
        parse_server=parse_perftest,
        devices=RDMA_DEVICES,
        # -R listens through RDMA CM, otherwise on the TCP exchange port
        ready_probe=lambda ctx: (CM_LISTEN if perftest_uses_cm(ctx) else
                                 listening_probe(ctx.opt("port", PERFTEST_PORT))),
        key_figure="t_typical_usec" if test.endswith("_lat") else "bw_average",
        timeout=120.0,
    )


# --- mckey (RDMA CM multicast over UD) -----------------------------------------------------
MCKEY_UNSUPPORTED = "multicast needs UD QPs; iWARP (siw) has RC only"


def _mckey_receiver(ctx: RunContext) -> list[str]:
    count = int(ctx.opt("count", 4))
    wait = int(ctx.opt("wait", 20))
    # The rxe counter of receive completions on the receiving device, before and after the
    # run: how many multicast messages reached the receiver's QP even when mckey is cut off.
    recvs = recvs_counter(ctx.server.device)
    mckey = shlex.join(["stdbuf", "-oL", "mckey", "-m", ctx.opt("group", MCKEY_GROUP), "-b",
                        ctx.server.address, "-C", str(count)])
    script = (f"b=$({recvs}); timeout {wait} {mckey}; rc=$?; a=$({recvs}); "
              f"echo \"labctl: expected {count} rdma_recvs $b $a\"; exit $rc")
    return ["sh", "-c", script]


def _mckey_sender(ctx: RunContext, one_qp: bool) -> list[str]:
    count = str(ctx.opt("count", 4))
    argv = ["mckey", "-m", ctx.opt("group", MCKEY_GROUP), "-b", ctx.client.address, "-s"]
    # rxe transmits only the first of several sends posted on one QP before mckey (which
    # never waits for send completions) leaves the group and destroys the QP: see
    # docs/examples.md. One message from each of `count` QPs delivers them all.
    return argv + (["-C", count] if one_qp else ["-c", count, "-C", "1"])


MCKEY_NOT_ROUTED = ("multicast does not cross the lab's routers (they forward unicast only; "
                    "across topologies/routed.yaml mckey delivered 0/4)")


def _mckey(one_qp: bool) -> ExampleSpec:
    return ExampleSpec(
        name="mckey",
        variant="ud-1qp" if one_qp else "ud",
        server_argv=_mckey_receiver,
        client_argv=lambda ctx: _mckey_sender(ctx, one_qp),
        parse=parse_mckey,
        parse_server=parse_mckey,
        devices=ROCE_ONLY,
        unsupported_reason=MCKEY_UNSUPPORTED,
        # the receiver's IGMP join (made by RDMA CM) shows once it is a group member
        ready_probe=lambda ctx: group_joined_probe(ctx.opt("group", MCKEY_GROUP)),
        key_figure="delivered",
        timeout=60.0,
        one_segment=MCKEY_NOT_ROUTED,
    )


# --- perftest's atomics ---------------------------------------------------------------------
ATOMIC_PERFTESTS = ("ib_atomic_lat", "ib_atomic_bw")
NO_ATOMICS_ON_SIW = ("siw reports atomic_cap ATOMIC_NONE (ibv_devinfo -v) and refuses the "
                     "atomic work request (\"Couldn't post send\")")


def _atomic(test: str) -> ExampleSpec:
    base = _perftest(test)
    return ExampleSpec(**{**base.__dict__, "devices": ROCE_ONLY,
                          "unsupported_reason": NO_ATOMICS_ON_SIW})


# --- librdmacm's other examples ------------------------------------------------------------
# Each listens through RDMA CM (rsockets too: `rdma res show cm_id` shows rstream's LISTEN
# with "ps TCP"), so one probe serves them all.
def _port(ctx: RunContext, flag: str = "-p") -> list[str]:
    return [flag, str(ctx.opt("port"))] if ctx.opt("port") is not None else []


def _rdma_server_args(ctx: RunContext) -> list[str]:
    return ["-s", ctx.server.address, *_port(ctx)]


RDMA_SERVER = ExampleSpec(
    name="rdma-server",
    variant="rc",
    server_argv=lambda ctx: ["rdma_server", *_rdma_server_args(ctx)],
    client_argv=lambda ctx: ["rdma_client", *_rdma_server_args(ctx)],
    parse=parse_rdma_server,
    parse_server=parse_rdma_server,
    devices=RDMA_DEVICES,
    ready_probe=lambda ctx: CM_LISTEN,
    setup_failed=RDMA_CLIENT_SETUP_FAILED,
    key_figure="end",
    timeout=30.0,  # the exchange takes 2-5 s under TCG; a bound reached is the race below
    timeout_race=("a side disconnected as soon as it had the peer's message, before rxe "
                  "acknowledged it; the peer resends that SEND forever (retry count 7 is "
                  "unlimited on rxe) into a QP in error: docs/reliability.md"),
)
UD_UNSUPPORTED = ("iWARP (siw) has RC only: udaddy says \"unable to create QP: Operation not "
                  "supported\"")


def _cmatose_args(ctx: RunContext, connections: bool) -> list[str]:
    args = ["-C", str(ctx.opt("count", 10))]
    if connections:
        args += ["-c", str(ctx.opt("connections", 4))]
    if ctx.opt("size") is not None:
        args += ["-S", str(ctx.opt("size"))]
    return args


def _cmatose(program: str) -> ExampleSpec:
    """udaddy (UD) and ucmatose (RC, -c connections): RDMA CM with sends both ways.
    udaddy's -p is a port space, not a port: it takes no --port."""
    rc = program == "ucmatose"
    port = (lambda ctx: _port(ctx)) if rc else (lambda ctx: [])
    return ExampleSpec(
        name=program,
        variant="rc" if rc else "ud",
        server_argv=lambda ctx: [program, "-b", ctx.server.address,
                                 *_cmatose_args(ctx, rc), *port(ctx)],
        client_argv=lambda ctx: [program, "-s", ctx.server.address,
                                 *_cmatose_args(ctx, rc), *port(ctx)],
        parse=parse_cmatose,
        parse_server=parse_cmatose,
        devices=RDMA_DEVICES if rc else ROCE_ONLY,
        unsupported_reason="" if rc else UD_UNSUPPORTED,
        ready_probe=lambda ctx: CM_LISTEN,
        setup_failed=UCMATOSE_SETUP_FAILED if rc else (),  # udaddy (UD) makes no connection
        key_figure="return_status",
        timeout=90.0,
    )


# Established by trying in a siw-pair lab (rdma-core 56.1): no output at all, exit 1, on
# the server and the client alike.
CMTIME_ON_SIW = "cmtime exits 1 without a word on siw (rdma-core 56.1, seen in a siw lab)"
CMTIME = ExampleSpec(
    name="cmtime",
    variant="rc",
    server_argv=lambda ctx: ["cmtime", "-b", ctx.server.address, "-c",
                             str(ctx.opt("connections", 10)), *_port(ctx)],
    client_argv=lambda ctx: ["cmtime", "-s", ctx.server.address, "-c",
                             str(ctx.opt("connections", 10)), *_port(ctx)],
    parse=parse_cmtime,
    parse_server=parse_cmtime,
    devices=ROCE_ONLY,
    unsupported_reason=CMTIME_ON_SIW,
    ready_probe=lambda ctx: CM_LISTEN,
    key_figure="cm_connect_us_per_conn",
    timeout=120.0,
)


def _stream_args(ctx: RunContext) -> list[str]:
    return ["-S", str(ctx.opt("size", 4096)), "-C", str(ctx.opt("count", 100)), *_port(ctx)]


# Seen twice in a siw lab: the server prints its result row and exits 0, the client
# prints the header and never finishes (riostream, the same over riowrite, passes).
RSTREAM_ON_SIW = ("rstream's client hangs after the transfer on siw (the server finishes); "
                  "riostream passes")


def _rstream(program: str) -> ExampleSpec:
    """rstream (socket calls on rsockets) and riostream (riomap/riowrite: RDMA writes)."""
    return ExampleSpec(
        name=program,
        variant="rsocket",
        server_argv=lambda ctx: [program, "-b", ctx.server.address, *_stream_args(ctx)],
        client_argv=lambda ctx: [program, "-s", ctx.server.address, *_stream_args(ctx)],
        parse=parse_rstream,
        parse_server=parse_rstream,
        devices=RDMA_DEVICES if program == "riostream" else ROCE_ONLY,
        unsupported_reason="" if program == "riostream" else RSTREAM_ON_SIW,
        ready_probe=lambda ctx: CM_LISTEN,
        setup_failed=RSTREAM_SETUP_FAILED,
        key_figure="usec_per_xfer",
        timeout=90.0,
    )


RCOPY_SOURCE = "/tmp/labctl-rcopy.src"
RCOPY_DEST = "/tmp/labctl-rcopy.dst"
_RCOPY_LOG = "/tmp/labctl-rcopy.log"


def rcopy_content(size: int) -> str:
    """Shell text printing `size` bytes both sides can make alike (the server compares)."""
    return f"seq 1000000000 | head -c {int(size)}"


def _rcopy_server(ctx: RunContext) -> list[str]:
    # rcopy's server loops for ever: wait for its "...done" of one file, stop it, then
    # compare what arrived with what the client sent (made the same way here).
    size = int(ctx.opt("size", 65536))
    rcopy = shlex.join(["rcopy", *_port(ctx)])
    script = (f"rm -f {RCOPY_DEST} {_RCOPY_LOG}; {rcopy} >{_RCOPY_LOG} 2>&1 & pid=$!; "
              f"until grep -q 'done' {_RCOPY_LOG}; do kill -0 $pid || break; sleep 0.1; done; "
              f"kill $pid 2>/dev/null; cat {_RCOPY_LOG}; echo; "
              f"if {rcopy_content(size)} | cmp -s - {RCOPY_DEST}; then "
              f"echo 'labctl: received {size} bytes, identical'; else "
              f"echo \"labctl: received $(wc -c <{RCOPY_DEST} 2>/dev/null || echo 0) bytes, "
              f"different\"; exit 1; fi")
    return ["sh", "-c", script]


def _rcopy_client(ctx: RunContext) -> list[str]:
    size = int(ctx.opt("size", 65536))
    rcopy = shlex.join(["rcopy", RCOPY_SOURCE, f"{ctx.server.address}:{RCOPY_DEST}",
                        *_port(ctx)])
    return ["sh", "-c", f"{rcopy_content(size)} >{RCOPY_SOURCE} && {rcopy}"]


RCOPY = ExampleSpec(
    name="rcopy",
    variant="rsocket",
    server_argv=_rcopy_server,
    client_argv=_rcopy_client,
    parse=parse_rcopy,
    parse_server=parse_rcopy,
    devices=RDMA_DEVICES,
    ready_probe=lambda ctx: CM_LISTEN,
    setup_failed=RCOPY_SETUP_FAILED,
    key_figure="bytes",
    timeout=90.0,
)

EXAMPLES: dict[tuple[str, str], ExampleSpec] = {
    (spec.name, spec.variant): spec for spec in (
        _pingpong("rc"), _pingpong("uc"), _pingpong("ud"), _pingpong("srq"),
        _pingpong("rc", "python", "python"), _pingpong("rc", "python", "c"),
        _pingpong("rc", "c", "python"),
        RPING,
        *(_perftest(test) for test in PERFTESTS),
        _mckey(one_qp=False), _mckey(one_qp=True),
        RDMA_SERVER, _cmatose("udaddy"), _cmatose("ucmatose"), CMTIME,
        _rstream("rstream"), _rstream("riostream"), RCOPY,
        *(_atomic(test) for test in ATOMIC_PERFTESTS),
        QPERF, FABRIC,
    )
}

# Cases `labctl run all` lists as skipped although they can be run one by one, with why.
KNOWN_LIMITATIONS: dict[tuple[str, str], str] = {
    ("mckey", "ud-1qp"): "rxe sends only the first of several messages posted on one QP "
    "before mckey tears it down (docs/examples.md); `labctl run mckey --one-qp` shows it",
}


# `labctl run list`: what each example teaches (one line), by name.
TEACHES: dict[str, str] = {
    "pingpong": "verbs without RDMA CM: QPs set up by hand, one send/recv exchange at a time "
    "(rc, uc, ud, srq)",
    "rping": "RDMA CM connection, then RDMA READ and WRITE of advertised buffers",
    "perftest": "latency and bandwidth of send, RDMA WRITE/READ and atomics",
    "mckey": "RDMA CM multicast: UD sends to a group joined through IGMP",
    "rdma-server": "the smallest RDMA CM program: rdma_create_ep, connect, one send/recv",
    "udaddy": "UD through RDMA CM: address handles and datagrams without a connection",
    "ucmatose": "RC through RDMA CM with several connections at once (-c)",
    "cmtime": "what connection setup costs, step by step (resolve, QP, connect)",
    "rstream": "rsockets: socket calls carried over RDMA",
    "riostream": "rsockets with riomap/riowrite: RDMA writes behind a socket",
    "rcopy": "a file copied over rsockets, checked byte for byte",
    "qperf": "RDMA (RC through RDMA CM) against TCP: latency and bandwidth in one table",
    "fabric": "libfabric's fi_pingpong over the verbs provider (RDMA) and tcp, side by side",
}
