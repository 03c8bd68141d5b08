"""UCX between two nodes: ucx_perftest's tag-matching latency and bandwidth over RDMA
(rc_verbs on the node's rxe device) and over TCP (eth1), and what `ucx_info -d` sees.

Established in a trixie-workloads lab (UCX 1.18.1, rdma-core 56.1), docs/workloads.md:
- rc_verbs is a point-to-point transport: UCX needs an auxiliary transport to exchange its
  addresses. With UCX_TLS=rc_verbs alone ucx_perftest fails ("no auxiliary transport");
  with ud_verbs as that auxiliary the UD endpoint times out on rxe after 30 s ("UD endpoint
  ... unhandled timeout error", abort) although UD packets flow both ways. tcp as the
  auxiliary works, and UCX_PROTO_INFO=y shows every tag message on rc_verbs/rxe0:1: tcp
  carries only the wire-up.
- siw (iWARP): UCX opens no memory domain for it; with UCX_LOG_LEVEL=debug `ucx_info -d`
  says "device uverbs0 of type iWARP is not supported" (ib_md.c).
- Debian's ucx_perftest is built with MPI: without -P 0 it wants to be started by mpirun
  ("This test should be run with exactly 2 processes in p2p case").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from labctl.bounded import parse_float, parse_int
from labctl.errors import LabctlError
from labctl.lab.handle import LabHandle
from labctl.runners.example_spec import ExampleSpec, RunContext
from labctl.runners.examples import RDMA_DEVICES, ROCE_ONLY
from labctl.runners.probes import listening_probe

UCX_PORT = 13337  # ucx_perftest's own default (-p)
UCX_PACKAGES = ("ucx-utils",)
TESTS = ("tag_lat", "tag_bw")
TRANSPORTS = ("rdma", "tcp")
# ucx_perftest listens once UCX has loaded its modules: 1-3 s in an idle node, over 30 s
# (the examples' wait) in a freshly booted lab on a loaded TCG host (seen in a CI-like run).
UCX_READY_SECONDS = 120.0
WARMUP = 10  # ucx_perftest's default is 10000 warm-up iterations: minutes under TCG
# Small by default (TCG): about 10-30 s a run in a loaded host.
DEFAULT_SIZE = {"tag_lat": 8, "tag_bw": 65536}
DEFAULT_ITERS = {"tag_lat": 500, "tag_bw": 100}
UCX_ON_IWARP = ("UCX does not support iWARP: `ucx_info -d` on a siw node lists no memory "
                "domain for siw0, and with UCX_LOG_LEVEL=debug UCX says \"device uverbs0 of "
                "type iWARP is not supported\" (UCX 1.18.1); `labctl run ucx-info` shows it")


def ucx_env(ctx: RunContext, transport: str, side: str) -> list[str]:
    """UCX_TLS and UCX_NET_DEVICES of a run: the RDMA device (tcp only for UCX's wire-up,
    see the module's doc) or the data interface."""
    endpoint = ctx.server if side == "server" else ctx.client
    if transport == "rdma":
        return ["UCX_TLS=rc_verbs,tcp",
                f"UCX_NET_DEVICES={endpoint.device}:1,{endpoint.interface}"]
    return ["UCX_TLS=tcp", f"UCX_NET_DEVICES={endpoint.interface}"]


def _server_argv(ctx: RunContext, transport: str) -> list[str]:
    return ["env", *ucx_env(ctx, transport, "server"), "ucx_perftest", "-P", "0", "-p",
            str(ctx.opt("port", UCX_PORT))]


def _client_argv(ctx: RunContext, test: str, transport: str) -> list[str]:
    # UCX_PROTO_INFO: the client prints which transport each message size takes (the
    # record's "lanes": rc_verbs/rxe0:1 proves the RDMA run used RDMA).
    return ["env", *ucx_env(ctx, transport, "client"), "UCX_PROTO_INFO=y", "ucx_perftest",
            ctx.server.address,
            "-P", "0", "-p", str(ctx.opt("port", UCX_PORT)), "-t", test,
            "-s", str(ctx.opt("size", DEFAULT_SIZE[test])),
            "-n", str(ctx.opt("iters", DEFAULT_ITERS[test])), "-w", str(WARMUP)]


# ucx_perftest's final row: "Final:  ITERS  PERCENTILE  AVG  OVERALL  MB/s-AVG  MB/s-OVERALL
# MSG/s-AVG  MSG/s-OVERALL" (the time columns are latency for *_lat, overhead for *_bw).
_NUMBER = r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|inf|nan)"
_FINAL = re.compile(r"^Final:\s+(\d+)" + r"\s+" + r"\s+".join([_NUMBER] * 7) + r"\s*$")
_TIME_KIND = re.compile(r"\|\s+(latency|overhead) \(usec\)\s+\|")
_LANE = re.compile(r"\|\s+[\w.]+\s+\|[^|]*\|\s+([a-z_]+/[\w:.-]+)\s+\|")
_MAX_OUTPUT = 1 << 20  # characters of a client's output parsed at most


def parse_ucx_perftest(text: str) -> dict[str, Any]:
    """ucx_perftest's figures from its "Final:" row ({} without one: the run failed)."""
    text = text[-_MAX_OUTPUT:]
    figures: dict[str, Any] = {}
    for line in text.splitlines():
        final = _FINAL.match(line.strip())
        if final:
            values = [parse_float(v, "a ucx_perftest figure") for v in final.groups()[1:]]
            figures = {"iterations": parse_int(final.group(1), "iterations"),
                       "usec_percentile": values[0], "usec_average": values[1],
                       "usec_overall": values[2], "mb_per_sec_average": values[3],
                       "mb_per_sec_overall": values[4], "msg_per_sec_average": values[5],
                       "msg_per_sec_overall": values[6]}
    if not figures:
        return {}
    kind = _TIME_KIND.search(text)
    figures["time_kind"] = kind.group(1) if kind else "latency"
    # With UCX_PROTO_INFO=y: the transports the tag messages took (rc_verbs/rxe0:1).
    lanes = sorted({m.group(1) for m in _LANE.finditer(text)} - {"self/memory"})
    if lanes:
        figures["lanes"] = lanes
    return figures


def _ucx_spec(test: str, transport: str) -> ExampleSpec:
    return ExampleSpec(
        name="ucx",
        variant=f"{test}-{transport}",
        server_argv=lambda ctx: _server_argv(ctx, transport),
        client_argv=lambda ctx: _client_argv(ctx, test, transport),
        parse=parse_ucx_perftest,
        # UCX's tcp transport needs no RDMA device: it runs between siw nodes too.
        devices=ROCE_ONLY if transport == "rdma" else RDMA_DEVICES,
        unsupported_reason=UCX_ON_IWARP if transport == "rdma" else "",
        ready_probe=lambda ctx: listening_probe(ctx.opt("port", UCX_PORT)),
        key_figure="usec_percentile" if test == "tag_lat" else "mb_per_sec_overall",
        # UCX's start alone took a minute in a loaded host, then 40 ms an iteration
        timeout=300.0,
        ready_seconds=UCX_READY_SECONDS,
        packages=UCX_PACKAGES,
    )


# Not in the examples' catalogue: `labctl run all` runs on any image, UCX needs
# trixie-workloads (ExampleSpec.packages).
UCX_SPECS: dict[tuple[str, str], ExampleSpec] = {
    (test, transport): _ucx_spec(test, transport) for test in TESTS for transport in TRANSPORTS
}


def ucx_specs(tests: tuple[str, ...], transports: tuple[str, ...]) -> list[ExampleSpec]:
    """The runs of one `labctl run ucx`, RDMA first: on siw the first run is refused
    before any other starts."""
    return [UCX_SPECS[test, transport] for transport in transports for test in tests]


# --- ucx_info -d ---------------------------------------------------------------------------
# The lines of `ucx_info -d` (with UCX's debug log) a summary needs; the rest is dropped
# in the node (the debug log is hundreds of lines).
UCX_INFO_SCRIPT = ("UCX_LOG_LEVEL=debug ucx_info -d 2>&1 | grep -E "
                   "'^# +(Memory domain|Transport|Device):|is not supported'")
_INFO_LINE = re.compile(r"^#\s+(Memory domain|Transport|Device):\s+(\S+)\s*$")
_NOT_SUPPORTED = re.compile(r"UCX\s+\w+\s+(device \S+ of type \S+ is not supported)")
MAX_INFO_LINES = 2000


@dataclass
class UcxInfo:
    """What UCX sees in one node (`labctl run ucx-info --json` prints a list of them)."""

    node: str
    device: str  # the node's RDMA device (rxe0, siw0)
    device_type: str  # rxe | siw
    status: str  # "ok" | "failed"
    transports: list[str] = field(default_factory=list)  # every "transport/device"
    rdma_transports: list[str] = field(default_factory=list)  # those on the RDMA device
    memory_domains: list[str] = field(default_factory=list)
    ucx_says: list[str] = field(default_factory=list)  # UCX's own "not supported" lines
    reason: str = ""


def parse_ucx_info(text: str) -> dict[str, list[str]]:
    """Memory domains, "transport/device" pairs and UCX's "not supported" lines."""
    domains: list[str] = []
    transports: list[str] = []
    says: list[str] = []
    transport = ""
    for line in text.splitlines()[:MAX_INFO_LINES]:
        said = _NOT_SUPPORTED.search(line)
        if said:
            if said.group(1) not in says:
                says.append(said.group(1))
            continue
        match = _INFO_LINE.match(line.strip())
        if not match:
            continue
        key, value = match.groups()
        if key == "Memory domain":
            domains.append(value)
        elif key == "Transport":
            transport = value
        elif transport:  # a Device line closes a transport's entry
            transports.append(f"{transport}/{value}")
            transport = ""
    return {"memory_domains": domains, "transports": transports, "ucx_says": says}


def ucx_info(handle: LabHandle, node: str, device: str, device_type: str) -> UcxInfo:
    """Run `ucx_info -d` in `node` and summarise it."""
    record = UcxInfo(node, device, device_type, "failed")
    try:
        result = handle.run(node, ["sh", "-c", UCX_INFO_SCRIPT], timeout=90)
    except LabctlError as exc:
        record.reason = exc.message
        return record
    parsed = parse_ucx_info(result.stdout)
    record.memory_domains = parsed["memory_domains"]
    record.transports = parsed["transports"]
    record.ucx_says = parsed["ucx_says"]
    record.rdma_transports = [t for t in record.transports
                              if t.split("/", 1)[1].split(":")[0] == device]
    if not record.transports:
        record.reason = (f"ucx_info printed no transport (exit {result.returncode}): "
                         + (result.stderr.strip()[-300:] or "no output"))
        return record
    record.status = "ok"
    return record
