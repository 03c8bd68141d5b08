"""The interface every provider implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

from labctl.lab.labdir import LabDir
from labctl.topology.resolved import Lab

Progress = Callable[[str], None]

# What a node's init script reports (serial console for VMs, container log for containers).
READY = "labctl: ready"
FAIL = "labctl: fail"


@dataclass
class NodeRuntime:
    """What the provider knows of one node without asking the node."""

    name: str
    state: str  # "running" | "stopped" | "failed" | "absent"
    reason: str = ""
    details: dict[str, str] = field(default_factory=dict)


def runtime_from_boot_log(name: str, log: str, details: dict[str, str]) -> NodeRuntime:
    """A node whose process runs: ready, failed (with the init's reason) or still booting."""
    if READY in log:
        return NodeRuntime(name, "running", "", details)
    if FAIL in log:
        return NodeRuntime(name, "failed", log[log.index(FAIL) :].splitlines()[0], details)
    return NodeRuntime(name, "booting", "", details)


class Provider(ABC):
    name: str

    def __init__(self, lab: Lab, labdir: LabDir) -> None:
        self.lab = lab
        self.labdir = labdir

    @abstractmethod
    def check_host(self) -> None:
        """Raise LabctlError (with what to do) when this host cannot run the lab."""

    @abstractmethod
    def create(self, progress: Progress) -> None:
        """Make the lab's network and start its nodes (recording all of it in state)."""

    @abstractmethod
    def wait_ready(self, timeout: float, progress: Progress) -> None:
        """Return when every node reports ready; raise with the console tail otherwise."""

    @abstractmethod
    def nodes(self) -> list[NodeRuntime]:
        """The nodes as the provider sees them (process alive, why not)."""

    def set_link_state(self, node: str, ifname: str, up: bool) -> None:
        """Carrier of a node's data interface on or off, as a cable pulled or plugged."""
        raise NotImplementedError(f"the {self.name} provider cannot change link state")

    def repair(self, nodes: list[str], progress: Progress) -> None:
        """Start again the given nodes that stopped (their disks and addresses kept)."""
        raise NotImplementedError(f"the {self.name} provider cannot repair nodes")

    @abstractmethod
    def destroy(self) -> list[str]:
        """Remove everything recorded in the lab's state; return what was removed."""

    @abstractmethod
    def exec_argv(self, node: str, command: list[str], *, tty: bool = False) -> list[str]:
        """The host argv that runs `command` in `node`."""
