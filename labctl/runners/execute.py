"""Run one example between two nodes: server first, client once the server listens."""

from __future__ import annotations

import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from typing_extensions import TypedDict

from labctl.data.recipes import RECIPES, node_recipe
from labctl.errors import LabctlError, UsageError
from labctl.lab import counters
from labctl.lab.counters import Counters
from labctl.lab.handle import LabHandle
from labctl.node.env import rdma_device_name
from labctl.runners.diagnose import snapshot
from labctl.runners.example_spec import (
    Endpoint,
    ExampleSpec,
    RunContext,
    checked,
    parse_output,
)
from labctl.runners.pairs import ip_path, no_path_reason, pair_interfaces
from labctl.runners.probes import NetnsProbe
from labctl.runners.server import ServerProcess
from labctl.topology.lookup import require_node
from labctl.topology.resolved import Interface, Node
from labctl.wire.capture_record import CaptureRecord

# How long a server may take to listen. A Python (pyverbs) server's import alone is 16-26 s
# on a quiet TCG guest and over 30 s on a busy host; the wait ends as soon as the server
# listens, or exits, so a long bound costs only the runs that would have failed anyway.
READY_WAIT_SECONDS = 60.0
# Reading a node's counters around a run (a courtesy of the record): a node that does not
# answer within this is recorded as not read, not waited for.
COUNTERS_SECONDS = 10.0
READY_SLICE_SECONDS = 2.0
# A run that failed by a known race (ExampleSpec.setup_failed, .timeout_race,
# .connected_marker) is tried again with a fresh server and client, at most this often in
# all; the record says how many attempts it took and why the earlier ones failed.
MAX_ATTEMPTS = 3
# The reason of a run whose client finished but whose server was still waiting, stopped by
# the runner after a grace period.
SERVER_STALLED = "server still waiting"
SETUP_FAILED = "the connection setup failed although the server listened"


class RunPath(TypedDict):
    """How the client reaches the server: through which routers, with which GIDs."""

    routers: list[str]  # router nodes the client's packets pass, in order; [] on one segment
    hops: int  # len(routers)
    server_gid: str | None  # RoCE v2: ::ffff:<server address>; None on iWARP
    client_gid: str | None


@dataclass
class RunResult:
    """One run of an example: `labctl run EXAMPLE --json` prints it (docs/json.md)."""


    example: str
    variant: str
    server: str
    client: str
    status: Literal["passed", "failed", "skipped"]
    figures: dict[str, Any] = field(default_factory=dict)
    server_figures: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    server_argv: list[str] = field(default_factory=list)
    client_argv: list[str] = field(default_factory=list)
    server_output: str = ""
    client_output: str = ""
    seconds: float = 0.0
    key_figure: str = ""  # the name of the figure a summary shows
    capture: CaptureRecord | None = None  # `run --capture`: the pcap and opcode counts
    attempts: int = 1  # > 1: a known race ended an attempt; tried again with a fresh pair
    retried: list[str] = field(default_factory=list)  # why each earlier attempt failed
    # A failed run: each live node's RDMA state as it failed (runners/diagnose.py).
    diagnostics: dict[str, str] = field(default_factory=dict)
    # The IP path between the nodes: the routers the client's packets pass to reach the
    # server (hops: how many) and, on RoCE, the GIDs of both ends; None when there is none.
    path: RunPath | None = None
    # How each node's device (and TCP) counters changed over the run (lab/counters.py):
    # node -> "rxe0/1" or "tcp" -> counter -> change; None for a node not read.
    counters: dict[str, Counters | None] | None = None

    @property
    def label(self) -> str:
        return f"{self.example} {self.variant}".strip()

    def key_value(self) -> Any:
        """The key figure, from the client's figures or else the server's."""
        if not self.key_figure:
            return None
        return self.figures.get(self.key_figure, self.server_figures.get(self.key_figure))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rdma_node(handle: LabHandle, node: str) -> Node:
    lab_node = require_node(handle.lab, node)
    if lab_node.rdma_interface is None:
        raise UsageError(
            f"node {node} has no RDMA device (rdma: {lab_node.rdma})",
            hint="choose other nodes with --server/--client",
        )
    return lab_node


def missing_packages(spec: ExampleSpec, node: Node) -> UsageError | None:
    """Why `node`'s image cannot run `spec` (a package it needs is not there), as the
    refusal to raise or the reason to skip it with; None when it can (or when the image is
    not one labctl builds, whose packages labctl cannot know). The hint names the images
    that have them, and the `packages:` key that adds them to the node's own image."""
    if not spec.packages or node.image not in RECIPES:
        return None
    have = set(node_recipe(node.image, node.packages).packages)
    missing = [p for p in spec.packages if p not in have]
    if not missing:
        return None
    images = [name for name, recipe in RECIPES.items()
              if set(spec.packages) <= set(recipe.packages)]
    where = f"image: {' or '.join(images)}, or " if images else ""
    return UsageError(
        f"{spec.label}: node {node.name}'s image {node.image} lacks "
        f"{', '.join(missing)}",
        hint=f"give the nodes {where}packages: [{', '.join(missing)}] in the topology, "
             "then labctl down and up (topologies/workloads.yaml has them all)")


def check_image_packages(spec: ExampleSpec, node: Node) -> None:
    """UsageError (exit 2) when `node`'s image lacks a package `spec` needs: the program is
    not there, so the run could only fail."""
    refusal = missing_packages(spec, node)
    if refusal is not None:
        raise refusal


def endpoint(handle: LabHandle, node: str, iface: Interface | None = None) -> Endpoint:
    """The node's RDMA device on `iface` (default: its first device), GID index and data
    address (the first device's GID index is cached at `up`; another's is read live)."""
    lab_node = _rdma_node(handle, node)
    iface = iface or lab_node.rdma_interface
    assert iface is not None
    index = lab_node.device_index(iface)
    if index > 0:  # several devices (qemu nodes): rxe1 on the second interface, ...
        device = rdma_device_name(lab_node, index)
        found = [d for d in handle.node_status(node)["devices"] if d.get("name") == device]
        gid_index = found[0].get("gid_index") if found else None
    else:
        device = handle.rdma_device(node)
        info = handle.labdir.load_state().nodes.get(node)
        gid_index = info.gid_index if info else None
        if gid_index is None and lab_node.rdma == "rxe":
            devices = handle.node_status(node)["devices"]
            gid_index = devices[0]["gid_index"] if devices else None
    return Endpoint(node, device, lab_node.rdma, gid_index, iface.address, iface.name)


def _gid(ep: Endpoint) -> str | None:
    """The RoCE v2 GID the run uses: the IPv4-mapped form of the node's data address (the
    GID at the index labctl passes with -g/-x); iWARP has none."""
    return f"::ffff:{ep.address}" if ep.gid_index is not None else None


def bounded_in_node(argv: list[str], seconds: float, line_buffered: bool = True) -> list[str]:
    # The bound runs inside the node, so a stuck program dies even if ssh is cut. TERM first
    # (KILL 5 s later): `timeout` then exits 124; with --signal=KILL it killed its own process
    # group, itself included, and ssh reported a bare 255 instead of a timeout.
    # stdbuf: the examples print through stdio into a pipe (block-buffered); line buffering
    # keeps what a program printed before the bound ended it, for the record. The storage
    # steps are shell scripts that print their own lines and need none.
    buffering = ["stdbuf", "-oL", "-eL"] if line_buffered else []
    return ["timeout", "--kill-after=5", f"{seconds:.0f}", *buffering, *argv]


def lost_nodes(handle: LabHandle, nodes: tuple[str, str]) -> dict[str, str]:
    """Why each of a run's nodes that is no longer running is not (empty when both run)."""
    try:
        runtimes = handle.provider.nodes()
    except Exception:  # the reason is a courtesy; never hide the run's own failure
        return {}
    return {r.name: f"node {r.name} is {r.state}" + (f" ({r.reason})" if r.reason else "")
            for r in runtimes if r.name in nodes and r.state != "running"}


def _wait_listening(
    handle: LabHandle, spec: ExampleSpec, ctx: RunContext, server: ServerProcess
) -> None:
    if spec.ready_probe is None:
        time.sleep(1.0)
        return
    probe = spec.ready_probe(ctx)
    # The probe loops in the node for a slice at a time; between slices we look whether the
    # server is still there: one that exited (bad option, device error) fails the run now,
    # not at the end of the whole wait.
    # `timeout` bounds the slice by the clock: a count of tries is no bound when each
    # try's fork+exec takes up to a second under TCG.
    loop = f"until {probe}; do sleep 0.1; done"
    # labctl's own probes may be run from the node's host; a user's (`--ready`) in the node
    read = handle.run_in_netns if isinstance(probe, NetnsProbe) else handle.run
    bounded = ["timeout", f"{READY_SLICE_SECONDS:.0f}", "sh", "-c", loop]
    deadline = time.monotonic() + (spec.ready_seconds or READY_WAIT_SECONDS)
    while server.running():
        result = read(ctx.server.node, bounded, timeout=READY_SLICE_SECONDS + 15)
        if result.returncode == 0 and server.running():
            return
        if time.monotonic() > deadline:
            break
    raise RuntimeError("server did not start listening" + (
        "" if server.running() else f" (it exited with {server.returncode})"))


def _diagnose(handle: LabHandle, ctx: RunContext, result: RunResult,
              lost: dict[str, str]) -> None:
    """Read each live node's RDMA state while the failed pair still holds its resources."""
    live = [ep for ep in (ctx.server, ctx.client) if ep.node not in lost]
    with ThreadPoolExecutor(max_workers=2) as pool:  # both nodes at once: each takes seconds
        states = pool.map(lambda ep: snapshot(handle, ep.node, ep.device, ep.interface), live)
        result.diagnostics = {ep.node: state for ep, state in zip(live, states, strict=True)}


def _shortfall(result: RunResult) -> str:
    """Examples that count deliveries (mckey) fail honestly on a shortfall."""
    expected = result.server_figures.get("expected", result.figures.get("expected"))
    if expected is None:
        return ""
    delivered = result.server_figures.get("delivered", result.figures.get("delivered"))
    if delivered is None:
        return f"delivered ?/{expected} (no receive counters)"
    if delivered < expected:
        return f"delivered {delivered}/{expected}"
    return ""


def run_example(
    handle: LabHandle,
    spec: ExampleSpec,
    server_node: str,
    client_node: str,
    options: dict[str, Any],
) -> RunResult:
    options = checked(options)  # values reach argv and shell snippets in the nodes
    result = RunResult(spec.name, spec.variant, server_node, client_node, "failed",
                       key_figure=spec.key_figure)
    for node in (_rdma_node(handle, server_node), _rdma_node(handle, client_node)):
        check_image_packages(spec, node)
    ifaces = pair_interfaces(handle.lab, server_node, client_node)
    routers = ip_path(handle.lab, server_node, client_node)
    if ifaces is None or routers is None:
        result.status, result.reason = "skipped", no_path_reason(handle.lab, server_node,
                                                                 client_node)
        return result
    try:
        server_ep = endpoint(handle, server_node, ifaces[0])
        client_ep = endpoint(handle, client_node, ifaces[1])
    except UsageError:
        raise
    except LabctlError as exc:  # a node that cannot be asked or sent an unreadable reply
        result.reason = exc.message  # fails this pair, not the whole `run all`
        return result
    result.path = {"routers": routers, "hops": len(routers), "server_gid": _gid(server_ep),
                   "client_gid": _gid(client_ep)}
    if routers and spec.one_segment:
        result.status, result.reason = "skipped", spec.one_segment
        return result
    if server_ep.device_type != client_ep.device_type:
        result.status = "skipped"
        result.reason = (
            f"{server_node} has {server_ep.device_type} and {client_node} has "
            f"{client_ep.device_type}: RoCE and iWARP devices cannot talk"
        )
        return result
    if not spec.supports(server_ep.device_type):
        result.status = "skipped"
        result.reason = spec.unsupported_reason or f"not supported on {server_ep.device_type}"
        return result
    ctx = RunContext(server_ep, client_ep, options)
    refused = spec.refuse(ctx) if spec.refuse else ""
    if refused:
        result.status, result.reason = "skipped", refused
        return result
    timeout = float(options.get("timeout") or spec.timeout)
    result.server_argv = spec.server_argv(ctx)
    result.client_argv = spec.client_argv(ctx)
    nodes = [server_node, client_node]
    before = counters.read_all(handle, nodes, timeout=COUNTERS_SECONDS)
    started = time.monotonic()
    for attempt in range(1, MAX_ATTEMPTS + 1):
        result.attempts = attempt
        _attempt(handle, spec, ctx, result, timeout)
        why = _worth_another_attempt(spec, result)
        if not why or attempt == MAX_ATTEMPTS:
            break
        result.retried.append(f"attempt {attempt}: {result.reason} ({why})")
    result.seconds = round(time.monotonic() - started, 2)
    # A node that could not be read before the run is not asked again after it.
    after = counters.read_all(handle, [n for n in nodes if before[n] is not None],
                              timeout=COUNTERS_SECONDS)
    result.counters = {n: counters.delta(before[n], after.get(n)) for n in nodes}
    return result


def _worth_another_attempt(spec: ExampleSpec, result: RunResult) -> str:
    """Why a fresh server/client pair may pass where this one failed; "" if it may not."""
    if result.status != "failed":
        return ""
    if any(signature in result.client_output for signature in spec.setup_failed):
        return SETUP_FAILED
    timed_out = result.reason.startswith("client exited with 124")
    if spec.timeout_race and timed_out:
        return spec.timeout_race
    if spec.server_stall_race and result.reason.startswith(SERVER_STALLED):
        return spec.server_stall_race
    if spec.connected_marker and spec.connected_marker not in result.client_output:
        # Stalled or failed before it was connected: on siw under a loaded TCG host that is
        # the connection setup's own timing (docs/reliability.md, item 11), not the example.
        if timed_out:
            return "the client's connection setup never finished"
        return "the client failed before its connection was set up"
    return ""


def _attempt(handle: LabHandle, spec: ExampleSpec, ctx: RunContext, result: RunResult,
             timeout: float) -> None:
    """One server/client pair: fills `result` (status, reason, outputs, figures)."""
    server_node, client_node, options = result.server, result.client, ctx.options
    result.status, result.reason = "failed", ""
    result.client_output = result.server_output = ""
    result.figures, result.server_figures = {}, {}
    result.diagnostics = {}
    # The server's bound outlasts the client's and the failure snapshot after it: a server
    # still in its wait shows in `rdma res show`. The runner stops it sooner in any case.
    server = ServerProcess(handle, server_node, bounded_in_node(result.server_argv, timeout + 30))
    try:
        _wait_listening(handle, spec, ctx, server)
        client = handle.run(
            client_node, bounded_in_node(result.client_argv, timeout), timeout=timeout + 15
        )
        result.client_output = client.stdout + client.stderr
        grace = 15 + float(options.get("wait") or 0) if client.returncode == 0 else 3
        ended = server.wait(grace)
        lost = {} if ended and client.returncode == 0 else lost_nodes(
            handle, (server_node, client_node))
        if client.returncode != 0 or not ended or server.returncode != 0:
            _diagnose(handle, ctx, result, lost)
        server.stop(in_node=server_node not in lost)
        result.server_output = server.output()
        figures, unreadable = parse_output(spec.parse, result.client_output, "the client")
        result.figures = figures or {}
        if spec.parse_server and not unreadable:
            figures, unreadable = parse_output(spec.parse_server, result.server_output,
                                               "the server")
            result.server_figures = figures or {}
        shortfall = unreadable or _shortfall(result)
        if (client.returncode == 0 and server.returncode == 0 and result.figures
                and not shortfall):
            result.status = "passed"
        elif client.returncode == 0 and not ended:
            result.reason = f"{SERVER_STALLED} {grace:.0f} s after the client finished"
        else:
            failing = "client" if client.returncode != 0 else "server"
            code = client.returncode if failing == "client" else server.returncode
            result.reason = f"{failing} exited with {code}" + (
                " (timed out)" if code in (124, 137, -9) else ""
            )
            if shortfall:
                result.reason = shortfall + ("" if code == 0 else f"; {result.reason}")
            if lost:
                result.reason += "; " + "; ".join(lost.values())
    except RuntimeError as exc:
        _diagnose(handle, ctx, result, lost_nodes(handle, (server_node, client_node)))
        server.stop(in_node=True)
        result.server_output = server.output()
        result.reason = str(exc)
    finally:
        server.stop(in_node=False)  # whatever happened above: never leave our ssh behind




def command_line(argv: list[str]) -> str:
    return shlex.join(argv)


def outputs_text(result: RunResult) -> str:
    """Both sides' command lines and outputs, each under a `--- server NODE: ...` or
    `--- client NODE: ...` line (`run --show-output`, and the start of a failure's details)."""
    return (f"--- server {result.server}: {command_line(result.server_argv)}\n"
            f"{result.server_output.rstrip()}\n--- client {result.client}: "
            f"{command_line(result.client_argv)}\n{result.client_output.rstrip()}")


def failure_details(result: RunResult) -> str:
    """Both sides' command lines and outputs, then each node's state as the run failed."""
    text = outputs_text(result)
    for node, state in result.diagnostics.items():
        text += f"\n--- {node} state at the failure:\n{state}"
    return text
