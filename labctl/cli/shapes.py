"""The records the CLI builds as plain dicts and prints with `--json`, typed: the commands
annotate what they build with these (mypy holds them to it), and labctl/cli/schemas.py
makes the published JSON Schemas from them (docs/json/).

Outputs that are dataclasses already are their own model and are not repeated here: the
resolved lab (validate), RunResult (run), BenchReport (bench), the graph, doctor's
Check, the decoder's Frame (capture --decode). TypedDict from typing_extensions: pydantic
reads typing's only from Python 3.12 on.
"""

from __future__ import annotations

from typing import Literal, NotRequired

from typing_extensions import TypedDict

from labctl.capabilities import EngineKind
from labctl.lab.status import LabStatusRecord
from labctl.runners.execute import RunResult
from labctl.runners.ucx import UcxInfo
from labctl.topology.resolved import ProviderName, Rdma


# --- labctl status --json, labctl up --json ----------------------------------------------
class StatusOutput(TypedDict):
    """`labctl status --json`: every lab that is up (or the one --lab names)."""

    labs: list[LabStatusRecord]


class UpOutput(TypedDict):
    """`labctl up --json`: printed once every RDMA port is ACTIVE."""

    lab: str
    seconds: float  # how long `up` took
    repaired: list[str]  # a lab that was up: the nodes started again ([] for a new lab)
    # qemu: the nodes restored from a saved machine (the others booted their kernel)
    restored: list[str]
    status: LabStatusRecord  # as in `status --json`, the nodes' reports from when ready


# --- labctl down --json ------------------------------------------------------------------
class DownLab(TypedDict):
    lab: str
    removed: list[str]  # what was removed, e.g. "netns labctl-NAME"; [] nothing was left


class DownOutput(TypedDict):
    """`labctl down --json`: one record per lab taken down ([] when no lab is up)."""

    labs: list[DownLab]


# --- labctl image list --json ------------------------------------------------------------
class ImageRecord(TypedDict):
    """A cached image: its manifest.json's keys (labctl/images/builder.py writes them)."""

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
    disk_bytes: int  # what its directory takes on disk (allocated blocks)


class CorruptImage(TypedDict):
    path: str  # the image's cache directory
    problem: str  # what is wrong with its manifest.json


class SavedShape(TypedDict):
    accel: str  # kvm or tcg
    memory_mib: int
    cpus: int
    nics: int  # data NICs
    rdma: str  # rxe, siw or none


class SavedRecord(TypedDict):
    """A saved machine qemu nodes are restored from (docs/lifecycle.md, "Restored nodes")."""

    path: str
    image: str  # the image's key (its cache directory's name)
    shape: SavedShape | None  # None: not recorded (an older labctl)
    state_bytes: int | None  # the devices' state as qemu saved it
    ram_bytes: int | None  # the saved RAM file, mapped copy on write by restored nodes
    made: float | None  # seconds since the epoch
    usable: bool  # made by this labctl and qemu, its image cached: `up` restores from it
    disk_bytes: int  # what its directory takes on disk (allocated blocks)


class CacheEntry(TypedDict):
    """An entry of the image cache, with what it takes on disk."""

    kind: Literal["image", "log", "saved", "box", "docker-disk", "built", "package", "kernel",
                  "other"]
    path: str
    image: str | None  # the image key it was made from; None: shared or unknown
    disk_bytes: int  # allocated blocks (st_blocks * 512), links not followed
    current: bool  # this labctl makes or reads it (else `image prune` removes it)


class CacheUsage(TypedDict):
    root: str  # the cache directory
    total_bytes: int  # the sum of the entries' disk_bytes
    entries: list[CacheEntry]


class ImageListOutput(TypedDict):
    """`labctl image list --json`: the cached node images."""

    images: list[ImageRecord]
    corrupt: list[CorruptImage]  # images whose manifest labctl cannot use
    saved: list[SavedRecord]  # saved machines for restored nodes, by image and shape
    cache: CacheUsage  # every entry of the cache and its size on disk


class ImageRemovalOutput(TypedDict):
    """`labctl image rm --json`, `labctl image prune --json`: what was removed."""

    dry_run: bool  # --dry-run: nothing was removed, `removed` is what would be
    removed: list[CacheEntry]
    freed_bytes: int
    busy: list[CacheEntry]  # kept: a build of their image holds its lock
    in_use: list[str]  # image keys kept because a lab that is up uses them


class RecipeRow(TypedDict):
    name: str
    suite: str  # the userland's Debian suite
    kernel_suite: str  # where the kernel comes from


class VersionOutput(TypedDict):
    """`labctl version --json`."""

    labctl: str
    python: str
    qemu: str | None  # `qemu-system-x86_64 --version`'s first line; None: not installed
    recipes: list[RecipeRow]


# --- labctl doctor --json (its checks are labctl.cli.doctor.Check) -----------------------
class ProviderVerdict(TypedDict):
    provider: str  # a registered provider that has doctor's verdicts (labctl/capabilities.py)
    engine: EngineKind | None  # the provider's engine, for one that has several
    verdict: Literal["works", "available", "no"]  # available: starts on demand
    detail: str


# --- labctl topologies --json ------------------------------------------------------------
class TopologyRow(TypedDict):
    name: str  # what `labctl up NAME` takes
    file: str  # the shipped file
    nodes: int | None  # None (and provider None) when the file does not load: see error
    rdma: list[Rdma]  # the nodes' device kinds, sorted
    provider: ProviderName | None
    error: str  # "" unless the file does not load (a broken installation)


class TopologiesOutput(TypedDict):
    """`labctl topologies --json`: the shipped topologies."""

    topologies: list[TopologyRow]


# --- labctl run list --json --------------------------------------------------------------
class ExampleRow(TypedDict):
    example: str  # the `labctl run` subcommand
    variants: list[str]  # transports or tests; [] for a command without variants
    # device type (rxe, siw) -> the variants it runs; None for a command that is not one
    # catalogue example (all, custom, ucx, ucx-info, mpi, rdma-core-tests: see its -h)
    devices: dict[str, list[str]] | None
    teaches: str


class RunListOutput(TypedDict):
    """`labctl run list --json`: one row per `labctl run` subcommand."""

    examples: list[ExampleRow]


class RunRecords(TypedDict):
    """`labctl run EXAMPLE --json` (and all, nvmeof, nfs, ucx): the run records, one per
    run, under one key for one pair as for many."""

    records: list[RunResult]


class UcxInfoOutput(TypedDict):
    """`labctl run ucx-info --json`: one record per node asked."""

    nodes: list[UcxInfo]


# --- labctl stop|start|restart --json, cp --json, fault clear --json ----------------------
class NodeActionOutput(TypedDict):
    """`labctl stop|start|restart NODE --json`: what was done to the node."""

    lab: str
    node: str
    action: Literal["stopped", "started", "restarted"]
    seconds: float  # how long it took (start, restart: until the RDMA port was ACTIVE)


class CopyOutput(TypedDict):
    """`labctl cp SRC DST --json`: what was copied where."""

    lab: str
    node: str
    direction: Literal["to-node", "from-node"]
    source: str  # SRC as given
    destination: str  # where it landed: NODE:/path, or the host path
    skipped: str | None  # from a node: the device files or FIFOs it did not copy, or None
    seconds: float


class FaultClearOutput(TypedDict):
    """`labctl fault clear --json`: the faults taken off (ids as `fault list` showed)."""

    lab: str
    removed: list[int]


# --- labctl image build --json, docker-host up|down --json --------------------------------
class ImageBuildOutput(TypedDict):
    """`labctl image build --json`: the image now in the cache (built or found)."""

    name: str  # the recipe
    key: str  # the cache directory's name, NAME-HASH
    kernel: str
    rdma_core: str
    path: str
    seconds: float


class DockerHostUpOutput(TypedDict):
    """`labctl docker-host up --json`: the VM whose engine now answers."""

    name: str
    already_running: bool
    engine: str  # the engine's URL (docker -H)
    host_address: str | None  # named VMs: the address on the Docker hosts' network
    seconds: float
    timings: dict[str, float]  # the steps' seconds ({} when it was already running)


class DockerHostDownOutput(TypedDict):
    """`labctl docker-host down --json`: what was removed ([] when it was not running)."""

    name: str
    removed: list[str]


# --- labctl link set --json --------------------------------------------------------------
class LinkSetOutput(TypedDict):
    """`labctl link set NODE:IF ... --json`: what was done to the link."""

    lab: str
    node: str
    interface: str
    state: Literal["up", "down"] | None  # None: the carrier was not touched
    netem: list[str] | None  # netem's arguments now on the link; [] cleared; None untouched


# --- labctl exec --all --json ------------------------------------------------------------
class ExecNodeResult(TypedDict):
    node: str
    exit_code: int
    stdout: str
    stderr: str


class ExecAllOutput(TypedDict):
    """`labctl exec --all --json -- CMD...`: one record per node, in the lab's order."""

    lab: str
    command: list[str]
    nodes: list[ExecNodeResult]
    failed: list[str]  # the nodes where the command exited non-zero


# --- labctl docker-host status --json ----------------------------------------------------
class DockerHostBrief(TypedDict):
    """One other Docker host VM in `docker-host status --json`'s `others`."""

    name: str
    state: Literal["running", "stopped"]
    host_address: NotRequired[str]  # named VMs only
    socket: str


class DockerHostStatus(TypedDict):
    """`labctl docker-host status --json` (labctl.dockerhost.vm.DockerHostVM.status plus
    `labs` and `others`): keys beyond `running` and `state` only when the VM exists (and
    the engine facts only when its engine answers)."""

    name: str
    directory: str
    running: bool
    state: Literal["absent", "running", "stopped", "unreadable"]
    host_address: NotRequired[str]  # named VMs: the address on the Docker hosts' network
    pid: NotRequired[int]
    ssh: NotRequired[str]
    accel: NotRequired[str]
    memory_mib: NotRequired[int]
    cpus: NotRequired[int]
    image: NotRequired[str]
    data_disk: NotRequired[str]
    kernel: NotRequired[str]
    socket: NotRequired[str]
    engine: NotRequired[Literal["answering", "not answering"]]
    engine_version: NotRequired[str | None]  # as the engine says
    containers: NotRequired[int]
    images: NotRequired[list[str]]
    memory_used_mib: NotRequired[str]
    labs: list[str]
    others: list[DockerHostBrief]


