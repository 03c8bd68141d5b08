"""A lab's status as the lab service reports it: the provider's view of each node plus
what the node itself says (live, or as its ready line said at boot). `labctl status` and
`labctl up` print these records, and `--json` prints them as they are
(docs/json/status.schema.json, up.schema.json). The record has the same shape whatever
the provider."""

from __future__ import annotations

from pathlib import PurePath
from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict

from labctl.errors import LabctlError, UsageError
from labctl.lab.handle import LabHandle
from labctl.node.replies import DeviceStatus, LiveInterface, UnreadableReply
from labctl.store.labdir import LabDir, LockHolder, running_labs
from labctl.store.state import CorruptStateError, LabState, NodeStatus, Phase
from labctl.topology.resolved import ProviderName, Rdma


class TopologyInterface(TypedDict):
    name: str  # eth1
    ipv4: str  # 10.77.1.1/24, from the topology
    mac: str


class RecordedDevice(TypedDict):
    """An RDMA device as the node's ready line reported it at boot (`up --json`: no live
    query; labctl.store.state.NodeState keeps it)."""

    name: str
    port_state: str  # "?" when the ready line did not say
    active_mtu: str
    gid_index: int | None


class NodeKernel(TypedDict):
    """The kernel a node runs."""

    # "image": the node image's own; a host path: the kernel of the user's own the
    # topology's `kernel:` (or `up --kernel`) names; "provider": the kernel of the
    # node's container engine or Vagrant box, which labctl does not choose
    source: str
    release: str | None  # `uname -r` in the node; None unless it is running and answered


def kernel_source_words(source: str) -> str:
    """How a table names a node's kernel source: `image`, `provider`, `debian: PKGVERSION`
    (a debian:VERSION kernel, whose source in the JSON is its cache folder) or `own:
    FOLDER` (a kernel of the user's)."""
    if not source.startswith("/"):
        return source
    from labctl.images.debian_kernels import package_version_of  # only for such a kernel

    version = package_version_of(source)
    return f"debian: {version}" if version is not None else f"own: {PurePath(source).name}"


class NodeRecord(TypedDict):
    """One node in `status --json`: the provider's view plus what the node reports."""

    name: str
    state: NodeStatus
    reason: str  # why not running, or why the node could not be asked; "" when fine
    rdma: Rdma
    management: str | None  # 127.0.0.1:PORT of the node's ssh; None for container nodes
    interfaces: list[TopologyInterface]
    # [] unless the node is running and answered; `up --json`: as the node reported at boot
    devices: list[DeviceStatus] | list[RecordedDevice]
    live_interfaces: list[LiveInterface]  # [] unless the node is running and answered
    details: dict[str, str]  # provider facts: pid, accel (qemu), container, engine (docker)
    kernel: NodeKernel


class LabBusy(TypedDict):
    """An `up` or `down` holds the lab's lock now (its flock, tried by `status`)."""

    action: Literal["creating", "repairing", "removing"]
    pid: int | None  # the labctl holding it, as its lock.owner says; None if it does not


class LabStatusRecord(TypedDict):
    lab: str
    # "?": a corrupt lab, or one whose lab.json its `up` has not written yet
    provider: ProviderName | Literal["?"]
    phase: str  # "up" once `up` finished; "corrupt"; anything else: an unfinished `up`
    ready_seconds: float | None
    nodes: list[NodeRecord]
    error: NotRequired[str]  # only for phase "corrupt": what cannot be read, what to do
    # `status` always writes it (null: no `up` or `down` at work); `up --json` does not
    busy: NotRequired[LabBusy | None]


def _recorded_devices(state: LabState, node: str) -> dict[str, Any]:
    """The node's device as its ready line reported it at boot (see node-init.sh)."""
    info = state.nodes.get(node)
    if info is None or not info.rdma_dev:
        return {}
    return {"devices": [{"name": info.rdma_dev, "port_state": info.port_state or "?",
                         "active_mtu": info.active_mtu, "gid_index": info.gid_index}]}


def collect_status(handle: LabHandle, live: bool = True) -> LabStatusRecord:
    """Provider view plus, for running nodes, what the node itself reports.

    With live=False the node's own report is the one it gave when it became ready.
    """
    state = handle.labdir.load_state()  # a corrupt state.json: CorruptStateError (exit 1)
    runtimes = handle.provider.nodes()
    running = [r.name for r in runtimes if r.state == NodeStatus.RUNNING]
    live_info: dict[str, Any] = (handle.all_node_status(running) if live else
                                 {n: _recorded_devices(state, n) for n in running})
    nodes = []
    for runtime in runtimes:
        node = handle.lab.node(runtime.name)
        details = {k: str(v) for k, v in runtime.details.items()}
        record: NodeRecord = {
            "name": node.name,
            "state": runtime.state,
            "reason": runtime.reason,
            "rdma": node.rdma,
            "management": details.pop("ssh", None),
            "interfaces": [{"name": i.name, "ipv4": i.ipv4, "mac": i.mac} for i in node.interfaces],
            "devices": [],
            "live_interfaces": [],
            "details": details,
            "kernel": {"source": node.kernel if handle.provider.capabilities.kernel_choice
                       else "provider", "release": None},
        }
        info = live_info.get(node.name)
        if isinstance(info, UnreadableReply):  # it runs, but what it says cannot be used
            record["state"], record["reason"] = NodeStatus.UNREADABLE, info.message
        elif isinstance(info, LabctlError):  # could not be asked (ssh, timeout): say why
            record["reason"] = info.message
        elif info:
            record["devices"] = info["devices"]
            record["live_interfaces"] = info.get("interfaces", [])
            record["kernel"]["release"] = info.get("kernel")
        nodes.append(record)
    return {
        "lab": handle.lab.name,
        "provider": handle.lab.provider,
        "phase": str(state.phase),
        "ready_seconds": state.ready_seconds,
        "nodes": nodes,
    }


def is_finished(record: LabStatusRecord) -> bool:
    """The lab's `up` (or repair) finished: phase up."""
    return record["phase"] == Phase.UP


def is_healthy(record: LabStatusRecord) -> bool:
    """Finished, and every node runs."""
    return is_finished(record) and all(n["state"] == NodeStatus.RUNNING
                                       for n in record["nodes"])


def labs_status(lab: str | None) -> list[LabStatusRecord]:
    """The status of the lab `lab` names (bad input if it is not up), else of every lab
    that is up, each live: what `labctl status` shows."""
    return [lab_status(labdir) for labdir in _labdirs(lab)]


def _labdirs(lab: str | None) -> list[LabDir]:
    if lab is None:
        return [LabDir(name) for name in running_labs()]
    labdir = LabDir(lab)  # a bad name is a UsageError already
    if not labdir.path.exists():
        raise UsageError(f"no lab named {lab!r} is up",
                         hint=f"labs up: {', '.join(running_labs()) or 'none'}")
    return [labdir]


def lab_status(labdir: LabDir) -> LabStatusRecord:
    """collect_status(), or a "corrupt" record for a lab whose files cannot be read: one
    such lab must not hide the others. `busy` says
    whether an `up` or `down` holds the lab's lock now: then files not written yet (or
    half removed) are that command at work, not a lab to remove."""
    holder = labdir.lock_holder()
    try:
        record = collect_status(LabHandle(labdir))
    except LabctlError as exc:
        if holder is None and not isinstance(exc, CorruptStateError):
            raise
        record = {"lab": labdir.name, "provider": "?", "phase": _phase_on_disk(labdir, holder),
                  "ready_seconds": None, "nodes": []}
        if holder is None:
            record["error"] = f"{exc.message} ({exc.hint})" if exc.hint else exc.message
    record["busy"] = _busy(holder, record["phase"])
    return record


def _busy(holder: LockHolder | None, phase: str) -> LabBusy | None:
    """The `busy` record of a lab whose lock is held."""
    if holder is None:
        return None
    action: Literal["creating", "repairing", "removing"] = (
        "removing" if holder.action == "down" else
        "creating" if phase in (Phase.CREATING, "?") else "repairing")
    return {"action": action, "pid": holder.pid}


def _phase_on_disk(labdir: LabDir, holder: LockHolder | None) -> str:
    """state.json's phase while an `up` or `down` is at work on the lab ("?" when it cannot
    be read yet); "corrupt" for a lab nobody works on whose files cannot be read."""
    if holder is None:
        return "corrupt"
    try:
        return str(labdir.load_state().phase)
    except LabctlError:
        return "?"
