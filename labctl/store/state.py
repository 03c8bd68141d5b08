"""A lab's state (state.json): what its provider made, typed, and the one place that writes it.

Written before anything exists (phase "creating") and after every step, so that `status`
and `down` know what to look for even when `up` died half-way: the lifecycle
(labctl/lab/lifecycle.py) does, and providers record what they make mid-step through its
StateRecorder (labctl/store/state_recorder.py). Every write is atomic
(temp file + os.replace): a reader sees the old file or the new one, never half of one.
A file that is corrupt anyway (disk full, hand-edited) raises CorruptStateError: `status`
reports it, `down` falls back to what it can find without it (labctl/lab/lifecycle.py).
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from labctl import bounded
from labctl.capabilities import ENGINES
from labctl.errors import LabctlError, short_repr
from labctl.topology.model import NODE_NAME_RE


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
        # bounded's reasons start with the path: "PATH is a FIFO" reads "it is a FIFO" here
        why = why.replace(f"{path} is ", "it is ", 1)
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
    kind: str  # one of ENGINES
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
        raw = bounded.load_object(text)  # size, depth, NaN: BoundedError (a ValueError)
        data = _known(cls, raw)
        if not isinstance(data.get("provider"), str):
            raise ValueError("provider: not a string")
        data["phase"] = Phase(data.get("phase", Phase.CREATING))
        nodes = data.get("nodes", {})
        if nodes is None:
            nodes = {}
        if not isinstance(nodes, dict):
            raise ValueError("nodes: not a JSON object")
        data["nodes"] = {_node_key(k): _node(v) for k, v in nodes.items()}
        ready = data.get("ready_seconds")
        if ready is not None and (isinstance(ready, bool) or not isinstance(ready, int | float)
                                  or not bounded.finite(ready)):
            raise ValueError(f"ready_seconds: not a finite number ({short_repr(ready)})")
        if data.get("engine") is not None:
            data["engine"] = _engine(data["engine"])
        if data.get("vm") is not None:
            data["vm"] = VmInfo(**_known(VmInfo, data["vm"]))
        data["veths"] = [str(v) for v in data.get("veths") or []]
        return cls(**data)


# The Docker engines labctl records: the Docker host VM's socket, or DOCKER_HOST's URL.
# Never "-" first after ssh://: the SDK hands the host to the ssh program.
ENGINE_URL_RE = (r"(unix:///[A-Za-z0-9._/ +@-]+|tcp://[A-Za-z0-9.][A-Za-z0-9.:\[\]-]*"
                 r"|ssh://[A-Za-z0-9._][A-Za-z0-9._@:-]*)")


def _engine(raw: Any) -> EngineState:
    """The engine a docker lab's containers run in: `down` connects to it, so its URL
    must be one labctl could have recorded."""
    engine = EngineState(**_known(EngineState, raw))
    if engine.kind not in ENGINES or not isinstance(engine.base_url, str) or (
            not re.fullmatch(ENGINE_URL_RE, engine.base_url)):
        raise ValueError(f"engine: {short_repr(engine.kind)} at {short_repr(engine.base_url)}"
                         " is not an engine labctl uses")
    return engine


def _known(kind: type, raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValueError(f"{kind.__name__}: not a JSON object")
    names = {f.name for f in fields(kind)}
    return {k: v for k, v in raw.items() if k in names}


def _node_key(key: str) -> str:
    """A node name from the file, checked as the topology checks it: it becomes a path
    (nodes/NODE) and an ssh host argument, so "../x", "/tmp/x" or "-oProxyCommand=..."
    make the whole file corrupt (`down` then goes by what it can verify)."""
    if not re.fullmatch(NODE_NAME_RE, key):
        raise ValueError(f"nodes: {short_repr(key)} is not a node name")
    return key


def _int_field(node: NodeState, name: str, high: int) -> None:
    value = getattr(node, name)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise ValueError(f"{name}: not an integer from 0 to {high} ({short_repr(value)})")


def _node(raw: Any) -> NodeState:
    data = _known(NodeState, raw)
    data["taps"] = [TapState(**_known(TapState, t)) for t in data.get("taps") or []]
    data["argv"] = [str(a) for a in data.get("argv") or []]
    node = NodeState(**data)
    _int_field(node, "pid", 1 << 22)  # the kernel's pid_max limit
    _int_field(node, "ssh_port", 65535)
    return node


def atomic_write(path: Path, text: str | bytes, mode: int = 0o644) -> None:
    """Write `text` to `path` so that readers see the old or the new file, never a part;
    a failed write leaves no temporary file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode() if isinstance(text, str) else text)
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
        text = bounded.read_text(path)  # a regular file only, bounded: never a FIFO's wait
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CorruptStateError(path, str(exc)[:200], lab) from None
    try:
        return LabState.from_json(text)
    except (ValueError, TypeError, KeyError) as exc:
        raise CorruptStateError(path, f"{type(exc).__name__}: {exc}"[:200], lab) from None


def write_state(path: Path, state: LabState) -> None:
    atomic_write(path, state.to_json() + "\n")
