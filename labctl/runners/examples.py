"""The example catalogue: each entry is a spec; adding one is a few lines."""

from __future__ import annotations

import shlex

from labctl.lab.handle import LabHandle
from labctl.runners.parsers import parse_mckey, parse_perftest, parse_pingpong, parse_rping
from labctl.runners.spec import ExampleSpec, RunContext

PINGPONG_PORT = 18515
PERFTEST_PORT = 18515
MCKEY_GROUP = "239.1.1.1"
_CM_LISTEN = "rdma res show cm_id | grep -q LISTEN"

RDMA_DEVICES = frozenset({"rxe", "siw"})
ROCE_ONLY = frozenset({"rxe"})
NO_VERBS_PINGPONG_ON_IWARP = ("iWARP (siw) supports RC through RDMA CM only; the verbs "
                              "pingpongs set up QPs without RDMA CM")


# Ready probes and the mckey receiver are shell text run as root in the node: every value
# in them is an int made here or passes through shlex.quote (values are also checked
# before a run, see spec.check_options).
def listening_probe(port: int) -> str:
    """Exit 0 once something listens on TCP `port` in the node."""
    return f"ss -Hltn {shlex.quote(f'sport = :{int(port)}')} | grep -q ."


def group_joined_probe(group: str) -> str:
    """Exit 0 once the node is a member of multicast `group` (its IGMP join shows)."""
    return f"ip maddr show | grep -qwF -e {shlex.quote(group)}"


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
    )


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
    ready_probe=lambda ctx: _CM_LISTEN,
    key_figure="pings",
    timeout=90.0,
)


# --- perftest ------------------------------------------------------------------------------
PERFTESTS = ("ib_send_lat", "ib_write_lat", "ib_read_lat", "ib_send_bw", "ib_write_bw",
             "ib_read_bw")


def perftest_uses_cm(ctx: RunContext) -> bool:
    """siw (iWARP) needs RDMA CM (-R); on rxe it is optional (--rdma-cm)."""
    return ctx.server.device_type == "siw" or bool(ctx.opt("rdma_cm", False))


def _perftest_args(ctx: RunContext, side: str) -> list[str]:
    endpoint = ctx.server if side == "server" else ctx.client
    args = ["-d", endpoint.device, "-i", "1", "-F", "-n", str(ctx.opt("iters", 100))]
    if perftest_uses_cm(ctx):
        args.append("-R")
    elif endpoint.gid_index is not None:
        args += ["-x", str(endpoint.gid_index)]  # reproducible RoCE v2 GID
    if ctx.opt("size") is not None:
        args += ["-s", str(ctx.opt("size"))]
    if ctx.opt("port") is not None:
        args += ["-p", str(ctx.opt("port"))]
    return args


def _perftest(test: str) -> ExampleSpec:
    return ExampleSpec(
        name="perftest",
        variant=test,
        setup_rejected="Event: RDMA_CM_EVENT_REJECTED; error: 8",  # with -R; see spec.py
        server_argv=lambda ctx: [test, *_perftest_args(ctx, "server")],
        client_argv=lambda ctx: [test, *_perftest_args(ctx, "client"), ctx.server.address],
        parse=parse_perftest,
        parse_server=parse_perftest,
        devices=RDMA_DEVICES,
        # -R listens through RDMA CM, otherwise on the TCP exchange port
        ready_probe=lambda ctx: (_CM_LISTEN if perftest_uses_cm(ctx) else
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
    )


EXAMPLES: dict[tuple[str, str], ExampleSpec] = {
    (spec.name, spec.variant): spec for spec in (
        _pingpong("rc"), _pingpong("uc"), _pingpong("ud"), _pingpong("srq"),
        _pingpong("rc", "python", "python"), _pingpong("rc", "python", "c"),
        _pingpong("rc", "c", "python"),
        RPING,
        *(_perftest(test) for test in PERFTESTS),
        _mckey(one_qp=False), _mckey(one_qp=True),
    )
}

# Cases `labctl run all` lists as skipped although they can be run one by one, with why.
KNOWN_LIMITATIONS: dict[tuple[str, str], str] = {
    ("mckey", "ud-1qp"): "rxe sends only the first of several messages posted on one QP "
    "before mckey tears it down (docs/examples.md); `labctl run mckey --one-qp` shows it",
}

