"""`labctl run mpi`: Open MPI across N nodes of the lab, over UCX on RDMA and over TCP.

mpirun runs in the first node and starts a rank in each node (one slot each: a node has
one vCPU) by ssh over the data addresses (labctl.runners.labssh). Each rank runs
labctl.nodeside.mpi_bench: mpi4py's pingpong between ranks 0 and 1, then an allreduce of
rank+1 over all ranks, whose sum rank 0 checks against N(N+1)/2.

Transports (established in a trixie-workloads lab, Open MPI 5.0.7, UCX 1.18.1):
- ucx: `--mca pml ucx`, UCX_TLS=rc_verbs,self,sm,tcp: rc_verbs carries the messages
  (UCX_PROTO_INFO shows rc_verbs/rxe0:1); tcp is there for UCX's wire-up only, as rxe's UD
  wire-up times out (labctl.runners.ucx). Refused on siw: UCX does not support iWARP.
- tcp: `--mca pml ob1 --mca btl tcp,self`, the data subnet only.
Every node has 10.0.2.15 on its management interface (qemu user networking): PRRTE's
out-of-band channel is held to the data subnet too, or a node would "reach" itself.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from labctl.bounded import parse_float, parse_int
from labctl.data.recipes import RECIPES, node_recipe
from labctl.errors import LabctlError, UsageError, short_repr
from labctl.lab.handle import LabHandle
from labctl.nodeside import NODE_CODE
from labctl.runners.example_spec import check_seconds, parse_output
from labctl.runners.labssh import setup_data_ssh, ssh_command, stop_data_sshd
from labctl.runners.ucx import UCX_ON_IWARP
from labctl.topology.lookup import require_node
from labctl.topology.resolved import Node
from labctl.wire.capture_record import CaptureRecord

TRANSPORTS = ("ucx", "tcp")
MPI_PACKAGES = ("openmpi-bin", "python3-mpi4py")
HOSTFILE = "/tmp/labctl-mpi.hosts"
DEFAULT_TIMEOUT = 300.0  # seconds per mpirun: three TCG nodes take about a minute
DEFAULT_ITERS = 50
DEFAULT_MAX_SIZE = 1024
MAX_ITERS = 100000
MAX_SIZE = 1 << 24
# Left behind by an mpirun that was cut off: the PRRTE daemons and our ranks. Counted, then
# killed by their exact names in every node of the run after each mpirun, then counted again.
_COUNT = ("$(pgrep -x prted | wc -l) "
          "$(pgrep -f '^python3 -m labctl.nodeside.mpi_bench' | wc -l)")
CLEANUP = ["sh", "-c", f"echo found {_COUNT}; pkill -KILL -x prted; pkill -KILL -x mpirun; "
           "pkill -KILL -f '^python3 -m labctl.nodeside.mpi_bench'; sleep 0.5; "
           f"echo left {_COUNT}"]


@dataclass
class MpiRun:
    """One mpirun (a transport) across the nodes."""

    transport: str  # ucx | tcp
    status: Literal["passed", "failed", "skipped"]
    mca: list[str] = field(default_factory=list)  # the transport's mpirun options
    figures: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    argv: list[str] = field(default_factory=list)
    output: str = ""
    seconds: float = 0.0
    leftover: str = ""  # what the cleanup found and killed after mpirun ("" when nothing)


@dataclass
class MpiReport:
    """`labctl run mpi --json`."""

    example: str
    nodes: list[str]
    launcher: str  # the node mpirun runs in
    hostfile: str  # its text
    ssh: str  # how the ranks are started
    runs: list[MpiRun] = field(default_factory=list)
    capture: CaptureRecord | None = None  # --capture: on the launcher's data link

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- parsing rank 0's output ----------------------------------------------------------------
_NUMBER = r"(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_PINGPONG = re.compile(r"^\s*(\d+)\s+" + _NUMBER + r"\s+\|\s+" + _NUMBER + r"\s+±\s+"
                       + _NUMBER + r"\s+(\d+)\s*$")
_ALLREDUCE = re.compile(r"^labctl-allreduce: ranks (\d+) iterations (\d+) sum (-?\d+) "
                        r"expected (-?\d+) wrong (\d+) usec_mean " + _NUMBER
                        + r" usec_max " + _NUMBER + r"\s*$")
MAX_OUTPUT = 1 << 20


def parse_mpi_bench(text: str) -> dict[str, Any]:
    """The pingpong rows (size, MB/s, one-way usec) and the allreduce line of rank 0."""
    rows: list[dict[str, Any]] = []
    figures: dict[str, Any] = {}
    for line in text[-MAX_OUTPUT:].splitlines():
        row = _PINGPONG.match(line)
        if row:
            rows.append({"size": parse_int(row.group(1), "size"),
                         "mb_per_sec": parse_float(row.group(2), "MB/s"),
                         "usec": round(parse_float(row.group(3), "seconds") * 1e6, 1),
                         "usec_stddev": round(parse_float(row.group(4), "seconds") * 1e6, 1),
                         "samples": parse_int(row.group(5), "samples")})
            continue
        reduce = _ALLREDUCE.match(line.strip())
        if reduce:
            ranks, iters, total, expected, wrong = (parse_int(v, "an allreduce figure")
                                                    for v in reduce.groups()[:5])
            figures["allreduce"] = {
                "ranks": ranks, "iterations": iters, "sum": total, "expected": expected,
                "wrong": wrong, "usec_mean": parse_float(reduce.group(6), "usec_mean"),
                "usec_max": parse_float(reduce.group(7), "usec_max"),
                # checked here too: the sum of 1..ranks, and no wrong iteration
                "correct": total == expected == ranks * (ranks + 1) // 2 and wrong == 0}
    if rows:
        figures["pingpong"] = rows
        figures["pingpong_usec"] = rows[0]["usec"]  # the smallest size
        figures["pingpong_mb_per_sec"] = rows[-1]["mb_per_sec"]  # the largest
    return figures


# --- what a run needs --------------------------------------------------------------------
def check_mpi_options(iters: Any, size: Any, timeout: Any) -> tuple[int, int, float]:
    def whole(flag: str, value: Any, default: int, high: int) -> int:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
            raise UsageError(f"{flag} must be a whole number from 1 to {high} "
                             f"(got {short_repr(value)})", hint=f"e.g. {flag} {default}")
        return value

    return (whole("--iters", iters, DEFAULT_ITERS, MAX_ITERS),
            whole("--size", size, DEFAULT_MAX_SIZE, MAX_SIZE),
            DEFAULT_TIMEOUT if timeout is None else check_seconds("timeout", timeout))


def parse_transports(text: str) -> tuple[str, ...]:
    if text == "both":
        return TRANSPORTS
    if text not in TRANSPORTS:
        raise UsageError(f"unknown MPI transport {short_repr(text)}",
                         hint="use ucx, tcp or both")
    return (text,)


def choose_nodes(handle: LabHandle, text: str | None) -> list[Node]:
    """--nodes a,b,c (at least two, each with an RDMA device), or every rxe node."""
    lab = handle.lab
    if text:
        names = [n.strip() for n in text.split(",") if n.strip()]
        for name in names:
            require_node(lab, name, flag="--nodes")
        if len(set(names)) != len(names):
            raise UsageError("--nodes names a node twice", hint="e.g. --nodes rxe1,rxe2,rxe3")
        nodes = [lab.node(n) for n in names]
        for node in nodes:
            if node.rdma_interface is None:
                raise UsageError(f"node {node.name} has no RDMA device",
                                 hint="choose nodes with an RDMA device")
    else:
        nodes = [n for n in lab.nodes if n.rdma == "rxe" and n.rdma_interface is not None]
    if len(nodes) < 2:
        raise UsageError(f"MPI needs at least two nodes; lab {lab.name} gives "
                         f"{len(nodes)}" + ("" if text else " rxe node(s)"),
                         hint="name them with --nodes a,b,c")
    return nodes


def check_nodes(nodes: list[Node], transports: tuple[str, ...]) -> str:
    """The nodes' data subnet; UsageError (exit 2) when they cannot run it."""
    for node in nodes:
        if node.image in RECIPES:
            have = set(node_recipe(node.image, node.packages).packages)
            missing = [p for p in MPI_PACKAGES if p not in have]
            if missing:
                raise UsageError(f"mpi: node {node.name}'s image {node.image} lacks "
                                 f"{', '.join(missing)}", hint="give the nodes image: "
                                 "trixie-workloads (topologies/workloads.yaml), then down and up")
    if "ucx" in transports:
        iwarp = [n.name for n in nodes if n.rdma != "rxe"]
        if iwarp:
            verb = "has" if len(iwarp) == 1 else "have"
            raise UsageError(f"mpi over UCX: {', '.join(iwarp)} {verb} siw: {UCX_ON_IWARP}",
                             hint="use rxe nodes (--nodes), or --transport tcp")
    subnets = set()
    for node in nodes:
        iface = node.rdma_interface
        assert iface is not None  # choose_nodes checked
        subnets.add(str(ipaddress.ip_interface(iface.ipv4).network))
    if len(subnets) != 1:
        raise UsageError(f"the nodes' data addresses are in {len(subnets)} subnets "
                         f"({', '.join(sorted(subnets))}): mpi runs within one segment",
                         hint="choose nodes on one segment with --nodes")
    return subnets.pop()


def transport_mca(transport: str, subnet: str, devices: list[str],
                  interfaces: list[str]) -> list[str]:
    """mpirun's options (and -x environment) for one transport."""
    if transport == "ucx":
        nets = ",".join([*(f"{d}:1" for d in devices), *interfaces])
        return ["--mca", "pml", "ucx", "--mca", "btl", "self",
                "-x", "UCX_TLS=rc_verbs,self,sm,tcp", "-x", f"UCX_NET_DEVICES={nets}"]
    return ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
            "--mca", "btl_tcp_if_include", subnet]


def hostfile_text(addresses: list[str]) -> str:
    return "".join(f"{address} slots=1\n" for address in addresses)


def mpirun_argv(count: int, subnet: str, mca: list[str], iters: int, size: int,
                seconds: float) -> list[str]:
    """mpirun in the launcher, bounded inside the node (TERM, then KILL 10 s later)."""
    bench = ["-x", f"PYTHONPATH={NODE_CODE}", "python3", "-m", "labctl.nodeside.mpi_bench",
             "--iters", str(iters), "--max-size", str(size)]
    return ["timeout", "--kill-after=10", f"{seconds:.0f}",
            "env", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
            "mpirun", "--allow-run-as-root", "--hostfile", HOSTFILE, "-np", str(count),
            "--map-by", "node", "--mca", "plm_rsh_agent", ssh_command(),
            "--prtemca", "oob_tcp_if_include", subnet, *mca, *bench]


def cleanup_note(node: str, text: str) -> str:
    """What CLEANUP found in `node`: "" when mpirun left nothing, else what was killed (and
    what survived)."""
    counts: dict[str, list[str]] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) == 3 and words[0] in ("found", "left"):
            counts[words[0]] = words[1:]
    found, left = counts.get("found", ["?", "?"]), counts.get("left", ["?", "?"])
    if found == ["0", "0"] and left == ["0", "0"]:
        return ""
    note = f"{node}: killed {found[0]} prted, {found[1]} ranks"
    return note + ("" if left == ["0", "0"] else f"; {left[0]} prted, {left[1]} ranks remain")


def _cleanup(handle: LabHandle, nodes: list[str]) -> str:
    """Kill what an mpirun left; "" when nothing was left, else what was found."""
    notes = []
    for node in nodes:
        try:
            result = handle.run(node, CLEANUP, timeout=60)
        except LabctlError as exc:
            notes.append(f"{node}: {exc.message}")
            continue
        notes.append(cleanup_note(node, result.stdout))
    return "; ".join(n for n in notes if n)


def run_transport(handle: LabHandle, nodes: list[Node], transport: str, subnet: str,
                  iters: int, size: int, seconds: float) -> MpiRun:
    names = [n.name for n in nodes]
    devices = sorted({handle.rdma_device(n) for n in names})
    interfaces = sorted({n.rdma_interface.name for n in nodes if n.rdma_interface})
    mca = transport_mca(transport, subnet, devices, interfaces)
    run = MpiRun(transport, "failed", mca=mca,
                 argv=mpirun_argv(len(nodes), subnet, mca, iters, size, seconds))
    started = time.monotonic()
    try:
        result = handle.run(names[0], run.argv, timeout=seconds + 30)
        run.output = (result.stdout + result.stderr)[-MAX_OUTPUT:]
        figures, unreadable = parse_output(parse_mpi_bench, result.stdout, "rank 0")
        run.figures = figures or {}
        allreduce = run.figures.get("allreduce", {})
        if unreadable:
            run.reason = unreadable
        elif (result.returncode == 0 and run.figures.get("pingpong")
                and allreduce.get("correct")):
            run.status = "passed"
        elif result.returncode in (124, 137):
            run.reason = f"mpirun did not finish within {seconds:.0f} s (--timeout)"
        elif result.returncode != 0:
            run.reason = f"mpirun exited with {result.returncode}"
        elif not allreduce:
            run.reason = "no allreduce result in rank 0's output"
        elif not allreduce.get("correct"):
            run.reason = (f"allreduce sum {allreduce.get('sum')}, expected "
                          f"{allreduce.get('expected')} ({allreduce.get('wrong')} wrong)")
        else:
            run.reason = "no pingpong figures in rank 0's output"
    finally:
        run.leftover = _cleanup(handle, names)
        run.seconds = round(time.monotonic() - started, 2)
    return run


def run_mpi(handle: LabHandle, nodes: list[Node], transports: tuple[str, ...], iters: int,
            size: int, seconds: float,
            progress: Callable[[MpiRun], None] | None = None) -> MpiReport:
    """Set the nodes up (hostfile, ssh), run each transport, take the ssh down again."""
    subnet = check_nodes(nodes, transports)
    names = [n.name for n in nodes]
    addresses = {n.name: n.rdma_interface.address for n in nodes if n.rdma_interface}
    hosts = hostfile_text(list(addresses.values()))
    report = MpiReport("mpi", names, names[0], hosts,
                       f"{ssh_command()} (the lab's key from its directory, known_hosts of "
                       f"the nodes' host keys, an sshd on each data address)")
    try:
        setup_data_ssh(handle, addresses)
        wrote = handle.run(names[0], ["sh", "-c", f"cat > {shlex.quote(HOSTFILE)}"],
                           input=hosts, timeout=60)
        if wrote.returncode != 0:
            raise LabctlError(f"{names[0]}: cannot write {HOSTFILE}: {wrote.stderr.strip()}")
        for transport in transports:
            run = run_transport(handle, nodes, transport, subnet, iters, size, seconds)
            report.runs.append(run)
            if progress:
                progress(run)
    finally:
        stop_data_sshd(handle, names)
    return report
