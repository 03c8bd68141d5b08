"""Storage over RDMA and over TCP between two nodes (`labctl run nvmeof`, `labctl run nfs`):
kernel services, not programs, so a run is steps, each bounded in its node, not a server
program with a client beside it:

1. the client drops what an earlier run left (NVMe connections, NFS mounts),
2. the server drops what an earlier run left and sets up the target (nvmet, nfsd),
3. the client connects or mounts, writes a random pattern, reads it back, compares the
   SHA-256 sums, disconnects or unmounts,
4. after a failure, the client's cleanup again (a connection or mount left behind),
5. the server removes the target, whatever happened before.

A run's record is a RunResult (as the examples'): the setup and teardown command lines
and outputs are the "server" ones, the client's are the client ones.
"""

from __future__ import annotations

import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from labctl.errors import LabctlError, UsageError
from labctl.lab import counters
from labctl.lab.handle import LabHandle
from labctl.runners import nfs, nvmeof
from labctl.runners.diagnose import snapshot
from labctl.runners.example_spec import ArgvBuilder, ExampleSpec, RunContext, checked
from labctl.runners.execute import (
    COUNTERS_SECONDS,
    RunResult,
    bounded_in_node,
    check_image_packages,
    endpoint,
    lost_nodes,
)
from labctl.runners.pairs import ip_path, no_path_reason, pair_interfaces
from labctl.runners.storageio import parse_storage_io
from labctl.topology.lookup import require_node

TRANSPORTS = ("rdma", "tcp")
CLEANUP_SECONDS = 30.0  # a cleanup step: a few configfs writes, a disconnect, an umount
SETUP_SECONDS = 90.0  # nfsd's start waits ~10 s for a client tracker the nodes lack
DEFAULT_TIMEOUT = 180.0  # the client's step: connect or mount, write and read, TCG speed
DEFAULT_MIB = 8
BOTH_DEVICES = frozenset({"rxe", "siw"})


@dataclass(frozen=True)
class StorageWorkload:
    """One workload over one transport: its steps' commands (RunContext -> argv)."""

    spec: ExampleSpec  # name, variant (the transport), setup and client argv, parser...
    server_teardown: ArgvBuilder
    client_cleanup: ArgvBuilder

    @property
    def transport(self) -> str:
        return self.spec.variant


class StorageScripts(Protocol):
    """What labctl.runners.nvmeof and labctl.runners.nfs each provide."""

    def server_setup(self, transport: str) -> ArgvBuilder: ...
    def client_run(self, transport: str) -> ArgvBuilder: ...
    def server_teardown(self, ctx: RunContext) -> list[str]: ...
    def client_cleanup(self, ctx: RunContext) -> list[str]: ...


def _workload(name: str, module: StorageScripts, transport: str,
              package: str) -> StorageWorkload:
    spec = ExampleSpec(
        name=name, variant=transport,
        server_argv=module.server_setup(transport),
        client_argv=module.client_run(transport),
        parse=parse_storage_io,
        devices=BOTH_DEVICES,
        timeout=DEFAULT_TIMEOUT,
        key_figure="write_mb_s",
        packages=(package,),
    )
    return StorageWorkload(spec, module.server_teardown, module.client_cleanup)


WORKLOADS: dict[tuple[str, str], StorageWorkload] = {
    (name, transport): _workload(name, module, transport, package)
    for name, module, package in (("nvmeof", nvmeof, "nvme-cli"),
                                  ("nfs", nfs, "nfs-kernel-server"))
    for transport in TRANSPORTS
}

TEACHES = {
    "nvmeof": "NVMe over Fabrics: a kernel nvmet target (configfs) and nvme-cli's host, over "
    "RDMA and over TCP",
    "nfs": "NFS over RDMA (svcrdma, proto=rdma) beside NFS over TCP, with a hand-started nfsd",
}


def transports(choice: str) -> tuple[str, ...]:
    """--transport's value: rdma, tcp or both (rdma first, tcp beside it)."""
    if choice == "both":
        return TRANSPORTS
    if choice in TRANSPORTS:
        return (choice,)
    raise UsageError(f"unknown transport {choice!r}", hint="use rdma, tcp or both")


def _step(handle: LabHandle, node: str, argv: list[str], seconds: float) -> tuple[int, str]:
    """Run one bounded step in `node`: its exit status (124: it ran into the bound) and
    output; a node that cannot be reached gives 255 and the reason as output."""
    try:
        # The bound runs in the node (a stuck step dies even if ssh is cut); ssh's own bound
        # is 15 s longer. A process in D state on a dead server cannot die: the cleanup
        # steps (disconnect, umount -f -l) are what free it.
        bounded = bounded_in_node(argv, seconds, line_buffered=False)
        done = handle.run(node, bounded, timeout=seconds + 15)
    except LabctlError as exc:
        return 255, exc.message
    return done.returncode, done.stdout + done.stderr


def _why(step: str, code: int, figures: dict[str, Any]) -> str:
    """"STEP exited with CODE", with "(timed out)" and the script's own failed step."""
    failed = figures.get("failed_step")
    text = f"{step} exited with {code}"
    if code in (124, 137):
        text += " (timed out)"
    return text + (f" at {failed!r}" if failed else "")


def run_storage(handle: LabHandle, workload: StorageWorkload, server: str, client: str,
                options: dict[str, Any]) -> RunResult:
    """One workload over one transport between `server` and `client` (the steps above)."""
    spec = workload.spec
    options = checked(options)
    for node in (server, client):
        require_node(handle.lab, node)
    result = RunResult(spec.name, spec.variant, server, client, "failed",
                       key_figure=spec.key_figure)
    ifaces = pair_interfaces(handle.lab, server, client)
    routers = ip_path(handle.lab, server, client)
    if ifaces is None or routers is None:
        result.status, result.reason = "skipped", no_path_reason(handle.lab, server, client)
        return result
    for lab_node in (handle.lab.node(server), handle.lab.node(client)):
        check_image_packages(spec, lab_node)
    try:
        server_ep = endpoint(handle, server, ifaces[0])
        client_ep = endpoint(handle, client, ifaces[1])
    except UsageError:
        raise
    except LabctlError as exc:
        result.reason = exc.message
        return result
    if workload.transport == "rdma" and server_ep.device_type != client_ep.device_type:
        result.status = "skipped"
        result.reason = (f"{server} has {server_ep.device_type} and {client} has "
                         f"{client_ep.device_type}: RoCE and iWARP devices cannot talk "
                         "(over tcp they can)")
        return result
    ctx = RunContext(server_ep, client_ep, options)
    result.server_argv = spec.server_argv(ctx)
    result.client_argv = spec.client_argv(ctx)
    nodes = [server, client]
    before = counters.read_all(handle, nodes, timeout=COUNTERS_SECONDS)
    started = time.monotonic()
    _steps(handle, workload, ctx, result, float(options.get("timeout") or spec.timeout))
    result.seconds = round(time.monotonic() - started, 2)
    after = counters.read_all(handle, [n for n in nodes if before[n] is not None],
                              timeout=COUNTERS_SECONDS)
    result.counters = {n: counters.delta(before[n], after.get(n)) for n in nodes}
    return result


def _steps(handle: LabHandle, workload: StorageWorkload, ctx: RunContext, result: RunResult,
           timeout: float) -> None:
    server, client = ctx.server.node, ctx.client.node
    server_log: list[str] = []
    code, out = _step(handle, client, workload.client_cleanup(ctx), CLEANUP_SECONDS)
    result.client_output = out
    if code != 0:
        result.reason = f"cleanup on {client} exited with {code}"
        return _finish(handle, ctx, result, server_log)
    code, out = _step(handle, server, result.server_argv, SETUP_SECONDS)
    server_log.append(out)
    setup_figures = parse_storage_io(out)
    if code != 0:
        result.reason = _why(f"target setup on {server}", code, setup_figures)
        _teardown(handle, workload, ctx, server_log)
        return _finish(handle, ctx, result, server_log)
    code, out = _step(handle, client, result.client_argv, timeout)
    result.client_output += out
    result.figures = workload.spec.parse(result.client_output)
    verified = result.figures.get("verified")
    if code != 0 or verified is not True:
        if verified is False:
            result.reason = "the bytes read back differ from those written"
        elif code != 0:
            result.reason = _why(f"the client on {client}", code, result.figures)
        else:
            result.reason = f"the client on {client} printed no check of the bytes read back"
        _diagnose(handle, ctx, result)
        cleanup_code, cleanup_out = _step(handle, client, workload.client_cleanup(ctx),
                                          CLEANUP_SECONDS)
        result.client_output += cleanup_out
        if cleanup_code != 0:
            result.reason += f"; cleanup on {client} exited with {cleanup_code}"
    teardown_code = _teardown(handle, workload, ctx, server_log)
    if not result.reason and teardown_code != 0:
        result.reason = f"target teardown on {server} exited with {teardown_code}"
    if not result.reason:
        result.status = "passed"
    _finish(handle, ctx, result, server_log)


def _teardown(handle: LabHandle, workload: StorageWorkload, ctx: RunContext,
              server_log: list[str]) -> int:
    code, out = _step(handle, ctx.server.node, workload.server_teardown(ctx), CLEANUP_SECONDS)
    server_log.append(f"--- teardown: {shlex.join(workload.server_teardown(ctx)[:2])} ...\n"
                      + out)
    return code


def _finish(handle: LabHandle, ctx: RunContext, result: RunResult,
            server_log: list[str]) -> None:
    result.server_output = "\n".join(server_log)
    if result.status != "passed":
        lost = lost_nodes(handle, (ctx.server.node, ctx.client.node))
        if lost:
            result.reason += "; " + "; ".join(lost.values())


def _diagnose(handle: LabHandle, ctx: RunContext, result: RunResult) -> None:
    """Each live node's RDMA state as the client failed (a courtesy: never raises)."""
    lost = lost_nodes(handle, (ctx.server.node, ctx.client.node))
    live = [ep for ep in (ctx.server, ctx.client) if ep.node not in lost]
    with ThreadPoolExecutor(max_workers=2) as pool:
        states = pool.map(lambda ep: snapshot(handle, ep.node, ep.device, ep.interface), live)
        result.diagnostics = {ep.node: state for ep, state in zip(live, states, strict=True)}
