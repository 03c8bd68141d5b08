"""A lab's state (state.json): what its provider made, typed, and the one place that writes it.

Written before anything exists (phase "creating") and after every step, so that `status`
and `down` know what to look for even when `up` died half-way. Every write is atomic
(temp file + os.replace): a reader sees the old file or the new one, never half of one.
A file that is corrupt anyway (disk full, hand-edited) raises CorruptStateError: `status`
reports it, `down` falls back to what it can find without it (labctl/lab/lifecycle.py).
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from labctl.errors import LabctlError


class NodeStatus(enum.StrEnum):
    """What `labctl status` says of a node (providers emit exactly these)."""

    RUNNING = "running"  # ready: its RDMA device is ACTIVE
    BOOTING = "booting"  # its process runs, no ready/fail line yet
    FAILED = "failed"  # its init reported a failed step
    STOPPED = "stopped"  # it was started and is gone (a repair starts it again)
    ABSENT = "absent"  # never started (or its container/VM is gone)
    UNRECORDED = "unrecorded"  # its process runs but `up` died before recording it
    UNREADABLE = "unreadable"  # it runs but answered `status` with something unusable


class Phase(enum.StrEnum):
    CREATING = "creating"
    UP = "up"
    REPAIRING = "repairing"


class CorruptStateError(LabctlError):
    """lab.json or state.json cannot be read: `labctl down` still removes the lab."""

    def __init__(self, path: Path, why: str, lab: str) -> None:
        super().__init__(f"{path} is corrupt ({why})",
                         hint=f"`labctl down --lab {lab}` removes the lab from what it can find")


@dataclass
class TapState:
    name: str
    bridge: str
    mtu: int


@dataclass
class NodeState:
    rdma_dev: str = ""
    # qemu nodes (and the Docker host VM)
    ssh_port: int = 0
    argv: list[str] = field(default_factory=list)  # "{fd:TAP}" stands for the tap's fd
    taps: list[TapState] = field(default_factory=list)
    pid: int = 0
    started: float = 0.0
    # container nodes
    container: str = ""
    id: str = ""
    # what the node's ready line (or the vagrant status probe) reported
    gid_index: int | None = None
    active_mtu: str = ""
    port_state: str = ""

    def clear_ready_facts(self) -> None:
        self.gid_index, self.active_mtu, self.port_state = None, "", ""


@dataclass
class EngineState:
    kind: str  # "vm" | "local"
    base_url: str


@dataclass
class VmInfo:
    """The Docker host VM's own settings (its state.json only)."""

    memory_mib: int = 1024
    cpus: int = 1
    image: str = ""
    data_disk: str = ""
    kernel: str = ""


@dataclass
class LabState:
    provider: str
    phase: Phase = Phase.CREATING
    netns: str = ""
    accel: str = ""
    nodes: dict[str, NodeState] = field(default_factory=dict)
    ready_seconds: float | None = None
    engine: EngineState | None = None  # docker
    veths: list[str] = field(default_factory=list)  # docker
    vagrant_provider: str = ""  # vagrant
    vm: VmInfo | None = None  # the Docker host VM

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> LabState:
        """Raises ValueError (or TypeError/KeyError) on anything that is not a state."""
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        data = _known(cls, raw)
        if not isinstance(data.get("provider"), str):
            raise ValueError("provider: not a string")
        data["phase"] = Phase(data.get("phase", Phase.CREATING))
        nodes = data.get("nodes", {})
        if nodes is None:
            nodes = {}
        if not isinstance(nodes, dict):
            raise ValueError("nodes: not a JSON object")
        data["nodes"] = {str(k): _node(v) for k, v in nodes.items()}
        if data.get("engine") is not None:
            data["engine"] = EngineState(**_known(EngineState, data["engine"]))
        if data.get("vm") is not None:
            data["vm"] = VmInfo(**_known(VmInfo, data["vm"]))
        data["veths"] = [str(v) for v in data.get("veths") or []]
        return cls(**data)


def _known(kind: type, raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValueError(f"{kind.__name__}: not a JSON object")
    names = {f.name for f in fields(kind)}
    return {k: v for k, v in raw.items() if k in names}


def _node(raw: Any) -> NodeState:
    data = _known(NodeState, raw)
    data["taps"] = [TapState(**_known(TapState, t)) for t in data.get("taps") or []]
    data["argv"] = [str(a) for a in data.get("argv") or []]
    node = NodeState(**data)
    if not isinstance(node.pid, int) or not isinstance(node.ssh_port, int):
        raise ValueError("pid and ssh_port must be integers")
    return node


def atomic_write(path: Path, text: str, mode: int = 0o644) -> None:
    """Write `text` to `path` so that readers see the old or the new file, never a part."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_state(path: Path, lab: str) -> LabState | None:
    """The state at `path`; None if there is none yet; CorruptStateError if unreadable."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise CorruptStateError(path, str(exc), lab) from None
    try:
        return LabState.from_json(text)
    except (ValueError, TypeError, KeyError) as exc:
        raise CorruptStateError(path, f"{type(exc).__name__}: {exc}"[:200], lab) from None


def write_state(path: Path, state: LabState) -> None:
    atomic_write(path, state.to_json() + "\n")
