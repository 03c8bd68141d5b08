"""The interface every provider implements, and what all of them share."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from labctl.capabilities import Capabilities
from labctl.errors import UsageError
from labctl.lab.labdir import LabDir
from labctl.lab.record import StateRecorder
from labctl.lab.state import LabState, NodeState, NodeStatus
from labctl.topology.resolved import Lab

Progress = Callable[[str], None]

# What a node's init script reports (serial console for VMs, container log for containers).
READY = "labctl: ready"
FAIL = "labctl: fail"
STAGE = "labctl: stage "


class UnsupportedError(UsageError):
    """An operation this provider cannot do (exit 2: the request, not the lab, is wrong)."""


@dataclass
class NodeRuntime:
    """What the provider knows of one node without asking the node."""

    name: str
    state: NodeStatus
    reason: str = ""
    details: dict[str, str] = field(default_factory=dict)


def ready_line(log: str) -> str | None:
    """The node's whole ready line, or None while there is none. Whole: the guest writes
    its console a piece at a time, and a reader that took "labctl: ready dev=rxe0 gid="
    as ready once failed `up` with int('') (the rest had not come yet)."""
    start = log.find(READY)
    end = log.find("\n", start)
    if start < 0 or end < 0:
        return None
    return log[start:end]


def runtime_from_boot_log(name: str, log: str, details: dict[str, str]) -> NodeRuntime:
    """A node whose process runs: ready, failed (with the init's reason) or still booting."""
    if ready_line(log) is not None:
        return NodeRuntime(name, NodeStatus.RUNNING, "", details)
    if FAIL in log:
        line = log[log.index(FAIL):].splitlines()[0]
        return NodeRuntime(name, NodeStatus.FAILED, line, details)
    return NodeRuntime(name, NodeStatus.BOOTING, "", details)


def ready_facts(log: str) -> dict[str, Any]:
    """What a node's ready line says: "labctl: ready dev=rxe0 gid=1 mtu=1024 state=ACTIVE".

    The guest writes that line (and can write anything): a value that is not of its
    kind is left out, as if the node had not said it."""
    line = (ready_line(log) or "").split(" [t=")[0]
    facts: dict[str, Any] = {}
    for word in line.removeprefix(READY).split():
        key, _, value = word.partition("=")
        if key == "gid" and value.isascii() and value.isdigit() and len(value) <= 5:
            facts["gid_index"] = int(value)
        elif key == "mtu" and value.isascii() and value.isdigit() and len(value) <= 5:
            facts["active_mtu"] = value
        elif key == "state" and value.isascii() and value.isalpha() and len(value) <= 16:
            facts["port_state"] = value
    return facts


def record_ready(node: NodeState, log: str) -> None:
    facts = ready_facts(log)
    node.gid_index = facts.get("gid_index")
    node.active_mtu = facts.get("active_mtu", "")
    node.port_state = facts.get("port_state", "")


class Provider(ABC):
    """One kind of node. The lifecycle (labctl/lab/lifecycle.py) calls these in its steps
    and owns state.json: a provider records what it makes through the step's recorder and
    fills the state it is given, never saving it or setting its phase itself."""

    name: str
    capabilities: ClassVar[Capabilities]

    def __init__(self, lab: Lab, labdir: LabDir) -> None:
        self.lab = lab
        self.labdir = labdir

    @abstractmethod
    def check_host(self) -> None:
        """Raise LabctlError (with what to do) when this host cannot run the lab."""

    @abstractmethod
    def create(self, record: StateRecorder, progress: Progress) -> None:
        """Make the lab's network and start its nodes, recording each node (and the facts
        `down` needs to find it) through `record` the moment it exists."""

    @abstractmethod
    def wait_ready(self, state: LabState, timeout: float, progress: Progress,
                   nodes: list[str] | None = None) -> None:
        """Return when every node (or each of `nodes`) reports ready, with what it reported
        filled in `state`'s nodes; raise with the console tail otherwise."""

    @abstractmethod
    def nodes(self) -> list[NodeRuntime]:
        """The nodes as the provider sees them (process alive, why not)."""

    def refuse_links(self, what: str, hint: str) -> UnsupportedError:
        """`what` (link set, link show, capture) refused: labctl holds no cable here."""
        caps = self.capabilities
        return UnsupportedError(f"{what} is not supported for {caps.kind} labs: their links "
                                f"are {caps.links}", hint=hint)

    def set_link_state(self, node: str, ifname: str, up: bool) -> None:
        """Carrier of a node's data interface on or off, as a cable pulled or plugged."""
        raise self.refuse_links("link set", hint=f"for this lab, `labctl exec {node} -- ip "
                                f"link set {ifname} down` changes the node's side")

    def repair(self, record: StateRecorder, nodes: list[str], progress: Progress) -> None:
        """Start again the given nodes that stopped (their disks and addresses kept),
        recording each through `record` as it starts."""
        raise UnsupportedError(f"the {self.capabilities.kind} provider cannot restart nodes "
                               "in place",
                               hint=f"`labctl down --lab {self.lab.name}`, then `labctl up`")

    def stop_node(self, node: str) -> None:
        """End the running `node` as a crash would (no shutdown in it); return once it is
        down. Its disk, addresses and recorded state stay, for `repair` to start it."""
        raise UnsupportedError(f"a node of a {self.capabilities.kind} lab cannot be stopped "
                               "alone", hint=f"`labctl down --lab {self.lab.name}` stops the lab")

    @abstractmethod
    def destroy(self) -> list[str]:
        """Remove everything recorded in the lab's state (or findable without it); return
        what was removed. Must work when state.json or lab.json is corrupt."""

    @abstractmethod
    def exec_argv(self, node: str, command: list[str], *, tty: bool = False) -> list[str]:
        """The host argv that runs `command` in `node`."""
