"""What a node's init reports on its console or log: the ready line, a failure, the
stages; read into what labctl knows of the node (NodeRuntime, NodeState facts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labctl.store.state import NodeState, NodeStatus

# What a node's init script reports (serial console for VMs, container log for containers).
READY = "labctl: ready"
FAIL = "labctl: fail"
STAGE = "labctl: stage "


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
