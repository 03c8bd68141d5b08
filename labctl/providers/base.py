"""The interface every provider implements, and what all of them share."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Final, Literal

from labctl.capabilities import Capabilities
from labctl.errors import UsageError
from labctl.node.ready import NodeRuntime
from labctl.progress import Progress
from labctl.store.labdir import LabDir
from labctl.store.state import LabState
from labctl.store.state_recorder import StateRecorder
from labctl.topology.resolved import Lab


class UnsupportedError(UsageError):
    """An operation this provider cannot do (exit 2: the request, not the lab, is wrong)."""


# Where a lab-side link end is: this host, or the Docker host VM.
Where = Literal["host", "vm"]
HOST: Final = "host"
VM: Final = "vm"


@dataclass(frozen=True)
class HostLink:
    """The lab's own end of a node's data interface: the device labctl made for it on the
    lab's bridge, where `capture` reads the node's traffic and `link show` its carrier."""

    device: str  # its name, e.g. t1-eth1
    kind: str  # what it is, as messages say it: tap, veth
    netns: str  # the lab's namespace, named from the lab (never state.json's: data)
    # where that namespace lives: this host's kernel, or the Docker host VM's
    engine: Where = HOST


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

    def host_link(self, state: LabState, node: str, ifname: str) -> HostLink:
        """The lab-side end of `node`'s `ifname`, as this lab's `state` places it. Refused
        where labctl holds no cable (capabilities.host_links is False): `capture` and `link
        show` ask the record first, to refuse with hints of their own."""
        raise self.refuse_links("the lab's side of a link", hint=f"`labctl exec {node} -- ip "
                                f"link show {ifname}` shows the node's side")

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

    def console_log(self, node: str) -> Path | None:
        """The file `node`'s console is written to (`labctl logs`); None when the provider
        keeps none (log_argv, or neither)."""
        return None

    def log_argv(self, node: str, *, lines: int, follow: bool) -> list[str] | None:
        """The host argv that prints `node`'s last `lines` log lines (and with `follow`
        goes on printing), for a provider whose log is not a file; None: no such command."""
        return None

    def netns_argv(self, node: str, command: list[str]) -> list[str]:
        """The host argv for one of labctl's own reads of `node`'s network namespace (its
        RDMA counters, listening sockets, multicast groups: a fixed command, never a
        user's). In the node itself unless a provider reaches that namespace more cheaply
        (docker: from the engine's host, labctl/dockerhost/netns.py)."""
        return self.exec_argv(node, command)
