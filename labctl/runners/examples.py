"""The example catalogue: each entry is a spec; adding one is a few lines."""

from __future__ import annotations

from labctl.runners.parsers import parse_pingpong
from labctl.runners.spec import ExampleSpec, RunContext

PINGPONG_PORT = 18515
_LISTENING = "ss -Hltn 'sport = :{port}' | grep -q ."


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


def _pingpong(transport: str) -> ExampleSpec:
    program = f"ibv_{transport}_pingpong"
    return ExampleSpec(
        name="pingpong",
        variant=transport,
        server_argv=lambda ctx: [program, *_pingpong_args(ctx, "server", transport)],
        client_argv=lambda ctx: [program, *_pingpong_args(ctx, "client", transport),
                                     ctx.server.address],
        parse=parse_pingpong,
        parse_server=parse_pingpong,
        devices=frozenset({"rxe"}),
        unsupported_reason="iWARP (siw) supports RC through RDMA CM only; the verbs "
        "pingpongs set up QPs without RDMA CM",
        ready_probe=lambda ctx: _LISTENING.format(port=ctx.opt("port", PINGPONG_PORT)),
        key_figure="usec_per_iter",
    )


EXAMPLES: dict[tuple[str, str], ExampleSpec] = {
    (spec.name, spec.variant): spec for spec in (
        _pingpong("rc"), _pingpong("uc"), _pingpong("ud"), _pingpong("srq"),
    )
}


def example(name: str, variant: str) -> ExampleSpec:
    return EXAMPLES[(name, variant)]
