"""Typed models of every `--json` output: one model per command, the same shape whatever
the number of labs, nodes or images. docs/json.md describes them; tests/unit/
test_json_shapes.py validates each command's real output against its model.

The models describe and check; the commands print plain JSON (no validation at run time: a
node running older node-side code must not turn `status` into a traceback).
`devinfo`/`devices`/`asyncwatch --json` are the node-side records of labctl/verbs/records.py.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class Shape(BaseModel):
    # A key the model does not name is a shape change: the test fails until docs and model
    # follow.
    model_config = ConfigDict(extra="forbid")


# --- labctl status --json ----------------------------------------------------------------
class TopologyInterface(Shape):
    name: str  # eth1
    ipv4: str  # 10.77.1.1/24, from the topology
    mac: str


class LiveInterface(Shape):
    name: str
    state: str | None  # operstate as the node sees it: UP, DOWN, ...
    mtu: int | None
    mac: str | None
    ipv4: list[str]


class DeviceStatus(Shape):
    name: str  # rxe0, siw0, rxe_LAB_NODE (container nodes)
    node_type: str
    netdev: str
    port_state: str  # ACTIVE, DOWN, ...
    link_layer: str
    active_mtu: str  # "1024"; "" when ibv_devinfo did not say
    gid_index: int | None  # the IPv4-mapped RoCE v2 GID (None on iWARP)
    gid_ipv4: str


class NodeStatus(Shape):
    name: str
    state: Literal["running", "booting", "failed", "stopped", "absent", "unrecorded",
                   "unreadable"]
    reason: str  # why not running, or why the node could not be asked; "" when fine
    rdma: Literal["rxe", "siw", "none"]
    management: str | None  # 127.0.0.1:PORT of the node's ssh; None for container nodes
    interfaces: list[TopologyInterface]
    devices: list[DeviceStatus]  # [] unless the node is running and answered
    live_interfaces: list[LiveInterface]  # [] unless the node is running and answered
    details: dict[str, str]  # provider facts: pid, accel (qemu), container, engine (docker)


class LabBusy(Shape):
    """An `up` or `down` holds the lab's lock now (its flock, tried by `status`)."""

    action: Literal["creating", "repairing", "removing"]
    pid: int | None  # the labctl holding it, as its lock.owner says; None if it does not


class LabStatus(Shape):
    lab: str
    # "?": a corrupt lab, or one whose lab.json its `up` has not written yet
    provider: Literal["qemu", "docker", "vagrant", "?"]
    phase: str  # "up" once `up` finished; "corrupt"; anything else: an unfinished `up`
    ready_seconds: float | None
    nodes: list[NodeStatus]
    error: str | None = None  # only for phase "corrupt": what cannot be read, what to do
    # `status` always writes it (null: no `up` or `down` at work); `up --json` need not
    busy: LabBusy | None = None


class StatusOutput(Shape):
    """`labctl status --json`: every lab that is up (or the one --lab names)."""

    labs: list[LabStatus]


# --- labctl image list --json ------------------------------------------------------------
class ImageRecord(Shape):
    name: str  # recipe: trixie, sid, docker-host
    key: str  # NAME-HASH, the cache directory's name
    suite: str
    kernel_suite: str
    kernel: str
    rdma_core: str
    siw: bool
    rootfs_bytes: int
    build_seconds: float
    # a topology's `packages:` added to the recipe; None: not recorded (an older image)
    added_packages: list[str] | None
    path: str


class CorruptImageRecord(Shape):
    path: str  # the image's cache directory
    problem: str  # what is wrong with its manifest.json


class ImageListOutput(Shape):
    """`labctl image list --json`: the cached node images."""

    images: list[ImageRecord]
    corrupt: list[CorruptImageRecord]  # images whose manifest labctl cannot use


# --- labctl doctor --json ----------------------------------------------------------------
class DoctorCheck(Shape):
    name: str
    result: Literal["ok", "no", "warn", "skipped"]
    detail: str
    todo: str  # what to do about it; "" when nothing


class ProviderVerdict(Shape):
    provider: Literal["qemu", "docker"]
    engine: Literal["vm", "local"] | None  # docker only
    verdict: Literal["works", "available", "no"]  # available: starts on demand
    detail: str


class DoctorOutput(Shape):
    """`labctl doctor --json`: the checks, a verdict per provider, and whether any works."""

    checks: list[DoctorCheck]
    providers: list[ProviderVerdict]
    usable: bool  # some provider works or is available here; else doctor exits 1


# --- labctl run ... --json ---------------------------------------------------------------
class TtlFlow(Shape):
    src: str  # IPv4 source (a RoCE v2 GID is its IPv4-mapped form)
    dst: str
    ttl: int  # IP TTL as captured: 64 leaving a node, one less per router passed
    packets: int


class RunCapture(Shape):
    """`labctl run ... --capture`: where the run's pcap is and what it holds."""

    pcap: str  # path of the pcap file
    node: str  # captured on this node's side of the link (the server's)
    interface: str
    packets: int
    opcodes: dict[str, int]  # packets per decoded opcode name (SEND_ONLY, ACKNOWLEDGE, ...)
    ttl: list[TtlFlow]  # RoCE v2 packets by source, destination and IP TTL
    hops: int | None  # routers between client and server, measured from the TTLs


class RunPath(Shape):
    """How the client reaches the server: through which routers, with which GIDs."""

    routers: list[str]  # router nodes the client's packets pass, in order; [] on one segment
    hops: int  # len(routers)
    server_gid: str | None  # RoCE v2: ::ffff:<server address>; null on iWARP
    client_gid: str | None


class RunRecord(Shape):
    """`labctl run EXAMPLE --json` prints one record; `labctl run all --json` a list."""

    example: str  # pingpong, rping, perftest, mckey
    variant: str  # rc, uc, ud, srq, rc-py, rc-py-c, rc-c-py, ib_write_bw, ud-1qp, ...
    server: str
    client: str
    status: Literal["passed", "failed", "skipped"]
    figures: dict[str, Any]  # the client's parsed output (the parser's names, numbers)
    server_figures: dict[str, Any]
    reason: str  # why failed or skipped; "" when passed
    server_argv: list[str]
    client_argv: list[str]
    server_output: str
    client_output: str
    seconds: float
    key_figure: str  # the name of the figure a summary shows, e.g. usec_per_iter
    capture: RunCapture | None  # with `--capture`; null otherwise
    attempts: int  # 1; more when a known race ended an attempt (docs/reliability.md)
    retried: list[str]  # "attempt N: why it failed (the race)" for each earlier attempt
    diagnostics: dict[str, str]  # failed runs: node -> its RDMA state at the failure; else {}
    path: RunPath | None  # null when skipped before the path was known (no IP path)
    # node -> "rxe0/1" or "tcp" -> counter -> its change over the run; a node null when
    # its counters could not be read; null for a run stopped before it started
    counters: dict[str, dict[str, dict[str, int]] | None] | None


# --- labctl bench --json -----------------------------------------------------------------
class ImplFigures(Shape):
    name: str  # c, c-events, python, tcp
    label: str
    usec_per_iter: float | None  # median over the passed runs; null when none passed
    msg_per_sec: float | None
    mbit_per_sec: float | None
    runs_usec: list[float]
    failures: int
    vs_tcp: float | None  # latency / TCP's at this size (< 1: faster than TCP)
    packets_per_msg: float | None  # data-link packets per message (marginal)
    cpu_usec_per_iter: float | None  # both guests' busy CPU per round trip (marginal)
    softirq_share: float | None  # part of that CPU time spent in softirq


class BenchPoint(Shape):
    size: int
    impls: dict[str, ImplFigures]
    ratios: dict[str, float | None]


class BenchBest(Shape):
    size: int
    impl: str
    vs_tcp: float


class BenchOutput(Shape):
    """`labctl bench --json`."""

    server: str
    client: str
    sizes: list[int]
    iters: int
    rounds: int
    link_mtu: int | None
    rdma_mtu: str  # the RDMA port's active MTU as `up` read it; "" when unknown
    accel: str  # tcg, kvm; "" for labs that are not VMs
    emulation_bound: bool  # true under TCG
    note: str  # why the figures are emulation-bound; "" otherwise
    points: list[BenchPoint]  # one per size, in the order asked
    best: BenchBest | None  # the RDMA implementation and size closest to (or below) TCP
    failed: list[RunRecord]


# --- labctl validate --json --------------------------------------------------------------
class LabInterface(Shape):
    name: str
    segment: int  # index into segments
    ipv4: str
    mac: str
    mtu: int


class LabRoute(Shape):
    to: str  # destination network, 10.77.2.0/24
    via: str  # gateway on one of the node's segments, 10.77.1.1


class LabNode(Shape):
    name: str
    index: int
    rdma: Literal["rxe", "siw", "none"]
    memory_mib: int
    cpus: int
    image: str
    interfaces: list[LabInterface]
    router: bool  # forwards IPv4 between its segments
    routes: list[LabRoute]  # explicit and computed routes (docs/topology.md, "Routes")
    rdma_ifnames: list[str]  # rdma_interfaces as written; [] = the first interface only
    packages: list[str] = []  # only when the node has extra packages (sorted)
    mounts: list[LabMount] = []  # only when the node has host folders


class LabMount(Shape):
    source: str  # absolute host path
    target: str  # absolute path in the node
    readonly: bool


class LabSegment(Shape):
    name: str
    index: int
    kind: Literal["p2p", "switch"]
    subnet: str
    mtu: int
    endpoints: list[str]


class ValidateOutput(Shape):
    """`labctl validate --json`: the resolved lab (labctl.topology.resolved.Lab)."""

    name: str
    provider: Literal["qemu", "docker", "vagrant"]
    source: str
    nodes: list[LabNode]
    segments: list[LabSegment]
    provider_options: dict[str, Any]


# --- labctl docker-host status --json ----------------------------------------------------
class DockerHostBrief(Shape):
    """One other Docker host VM in `docker-host status --json`'s `others`."""

    name: str
    state: Literal["running", "stopped"]
    socket: str
    host_address: str | None = None


class DockerHostStatus(Shape):
    """`labctl docker-host status --json`: keys beyond `running` and `state` only when the
    VM exists (and the engine facts only when its engine answers)."""

    directory: str
    running: bool
    state: Literal["absent", "running", "stopped"]
    labs: list[str]
    name: str
    others: list[DockerHostBrief]
    host_address: str | None = None
    pid: int | None = None
    ssh: str | None = None
    accel: str | None = None
    memory_mib: int | None = None
    cpus: int | None = None
    image: str | None = None
    data_disk: str | None = None
    kernel: str | None = None
    socket: str | None = None
    engine: Literal["answering", "not answering"] | None = None
    engine_version: str | None = None
    containers: int | None = None
    images: list[str] | None = None
    memory_used_mib: str | None = None


# Every command with a --json option, and its model (None: labctl/verbs/records.py).
# --- labctl run list --json ------------------------------------------------------------
class ExampleListRow(Shape):
    example: str  # the `labctl run` subcommand
    variants: list[str]  # transports or tests
    teaches: str
    devices: dict[str, list[str]]  # device type (rxe, siw) -> the variants it runs


SHAPES: dict[str, type[Shape] | None] = {
    "status": StatusOutput,
    "image list": ImageListOutput,
    "doctor": DoctorOutput,
    "run pingpong": RunRecord,
    "run rping": RunRecord,
    "run perftest": RunRecord,
    "run mckey": RunRecord,
    "run rdma-server": RunRecord,
    "run udaddy": RunRecord,
    "run ucmatose": RunRecord,
    "run cmtime": RunRecord,
    "run rstream": RunRecord,
    "run riostream": RunRecord,
    "run rcopy": RunRecord,
    "run custom": RunRecord,  # example "custom", variant ""
    "run all": RunRecord,  # a list of them
    "run list": ExampleListRow,  # a list of them
    "bench": BenchOutput,
    "validate": ValidateOutput,
    "docker-host status": DockerHostStatus,
    "devinfo": None,
    "devices": None,
    "asyncwatch": None,
}


# --- labctl graph --json (labctl/topology/graph.py) ------------------------------------
class GraphVertex(Shape):
    id: str  # a node's name, or "switch:" + its segment's name
    name: str
    kind: Literal["node", "router", "switch"]
    rdma: Literal["rxe", "siw", "none", ""]  # "" for a switch
    rdma_interfaces: list[str]
    subnet: str  # a switch's; "" for a node
    mtu: int  # a switch's; 0 for a node
    routes: list[str]  # "10.77.2.0/24 via 10.77.1.1"
    host: str  # multi-host docker labs: the node's host; ""
    device: str  # recorded by a lab that is up; "" from a topology file
    port_state: str  # recorded by a lab that is up; "" from a topology file


class GraphEnd(Shape):
    vertex: str  # a vertex id
    interface: str  # "" on a switch's side
    ipv4: str  # "" on a switch's side


class GraphEdge(Shape):
    segment: str
    kind: Literal["p2p", "switch"]
    subnet: str
    mtu: int
    ends: list[GraphEnd]  # two


class GraphOutput(Shape):
    """`labctl graph --json`: the lab as vertices and edges."""

    lab: str
    provider: Literal["qemu", "docker", "vagrant"]
    phase: str  # "" from a topology file
    vertices: list[GraphVertex]
    edges: list[GraphEdge]


SHAPES["graph"] = GraphOutput


# --- labctl link show --json (labctl/lab/links.py) ---------------------------------------
class Netem(Shape):
    """A netem root qdisc's settings (null: not set)."""

    delay_ms: float | None
    jitter_ms: float | None
    loss_percent: float | None  # random loss
    rate_mbit: float | None


class LinkEndState(Shape):
    node: str
    interface: str  # eth1
    # The node's interface as its kernel sees it: up (admin up, carrier), down, absent
    # (no such interface in the node), ? (the node could not be asked: `reason` says why)
    node_state: Literal["up", "down", "absent", "?"]
    operstate: str  # as `ip` says: UP, DOWN, LOWERLAYERDOWN...; "" when not read
    qdisc: str  # the interface's root qdisc (netem, fq_codel...); "" when not read
    netem: Netem | None  # null: no netem on the interface
    reason: str  # why node_state is "?"; "" otherwise
    host_interface: str  # the tap (qemu) or veth (docker) on the lab's bridge
    host_state: Literal["up", "down", "absent"] | None  # null: not on this host (docker)


class LinkState(Shape):
    segment: str
    kind: Literal["p2p", "switch"]
    subnet: str
    mtu: int
    ends: list[LinkEndState]


class LinkShowOutput(Shape):
    """`labctl link show --json`: the lab's data links."""

    lab: str
    provider: Literal["qemu", "docker"]
    links: list[LinkState]


SHAPES["link show"] = LinkShowOutput


# --- labctl topologies --json ------------------------------------------------------------
class TopologyRow(Shape):
    name: str  # what `labctl up NAME` takes
    file: str  # the shipped file
    nodes: int | None  # None (and provider None) when the file does not load: see error
    rdma: list[Literal["rxe", "siw", "none"]]  # the nodes' device kinds, sorted
    provider: Literal["qemu", "docker", "vagrant"] | None
    error: str  # "" unless the file does not load (a broken installation)


class TopologiesOutput(Shape):
    """`labctl topologies --json`: the shipped topologies."""

    topologies: list[TopologyRow]


# --- labctl up --json, labctl down --json ------------------------------------------------
class UpOutput(Shape):
    """`labctl up --json`: printed once every RDMA port is ACTIVE."""

    lab: str
    seconds: float  # how long `up` took
    repaired: list[str]  # a lab that was up: the nodes started again ([] for a new lab)
    status: LabStatus  # as in `status --json`, the nodes' reports from when they were ready


class DownLab(Shape):
    lab: str
    removed: list[str]  # what was removed, e.g. "netns labctl-NAME"; [] nothing was left


class DownOutput(Shape):
    """`labctl down --json`: one record per lab taken down ([] when no lab is up)."""

    labs: list[DownLab]


# --- labctl link set --json --------------------------------------------------------------
class LinkSetOutput(Shape):
    """`labctl link set NODE:IF ... --json`: what was done to the link."""

    lab: str
    node: str
    interface: str
    state: Literal["up", "down"] | None  # None: the carrier was not touched
    netem: list[str] | None  # netem's arguments now on the link; [] cleared; None untouched


# --- labctl exec --all --json ------------------------------------------------------------
class ExecNodeResult(Shape):
    node: str
    exit_code: int
    stdout: str
    stderr: str


class ExecAllOutput(Shape):
    """`labctl exec --all --json -- CMD...`: one record per node, in the lab's order."""

    lab: str
    command: list[str]
    nodes: list[ExecNodeResult]
    failed: list[str]  # the nodes where the command exited non-zero


# --- labctl capture --decode FILE.pcap --json --------------------------------------------
class CaptureFrame(Shape):
    """One line of `labctl capture --decode FILE.pcap --json` per packet (JSON Lines): the
    decoder's record (labctl/capture/decode.py Frame)."""

    index: int  # 1-based, in capture order
    time: float  # seconds since the epoch, from the pcap
    src: str
    dst: str
    proto: Literal["RoCEv2", "CM", "MAD", "iWARP", "TCP", "UDP", "ARP", "other"]
    ops: list[str]  # opcode names (an iWARP segment: several; [] for plain traffic)
    psn: int | None
    dest_qp: int | None
    ackreq: bool
    detail: dict[str, Any]  # the headers as decoded: DETH, RETH, AETH, mad, icrc, payload...
    note: str  # e.g. why an iWARP segment is not decoded


SHAPES.update({
    "topologies": TopologiesOutput,
    "up": UpOutput,
    "down": DownOutput,
    "link set": LinkSetOutput,
    "exec": ExecAllOutput,  # with --all
    "capture": CaptureFrame,  # one per line
})


# --- labctl fault list --json, labctl counters --json ----------------------------------------
class FaultMatch(Shape):
    action: Literal["drop", "delay", "duplicate", "reorder", "corrupt"]
    transport: Literal["roce", "tcp"]
    opcodes: list[int]
    opcode_words: list[str]
    qp: int | None
    psn: list[int] | None  # [low, high], inclusive
    tcp_port: int | None
    skip: int
    count: int  # 0: no limit
    every: int
    probability: float
    delay: str | None


class FaultAdded(Shape):
    """`labctl fault add --json`."""

    id: int
    node: str
    interface: str
    band: int  # the prio band 1:BAND on the interface
    spec: FaultMatch
    description: str


class FaultRecord(FaultAdded):
    matched: int | None  # packets the fault's match took so far; null: not read
    hit: int | None  # of them, the ones the fault acted on


class FaultList(Shape):
    lab: str
    faults: list[FaultRecord]


class CountersRecord(Shape):
    lab: str
    node: str
    counters: dict[str, dict[str, int]]  # "rxe0/1" or "tcp" -> counter -> value


SHAPES["fault add"] = FaultAdded
SHAPES["fault list"] = FaultList
SHAPES["counters"] = CountersRecord
