"""Faults on a running lab: add (all or nothing), list with their packet counts, clear.

The lab's faults are recorded in its directory (faults.json, gone with `down`, as is every
tc rule and pinned program: they live in the nodes, which `down` removes). A fault is put
on in two steps, the gate program (labctl/nodeside/faultgate.py, sent to the node's python3
on stdin) and the tc script (tcplan.py); when either fails, what was done of it is taken off
again.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from typing_extensions import TypedDict  # pydantic reads only this TypedDict on 3.11

from labctl import bounded
from labctl.errors import LabctlError, UsageError, short_repr
from labctl.lab.handle import LabHandle
from labctl.locks import blocking_lock
from labctl.node.replies import read_reply
from labctl.providers.base import UnsupportedError
from labctl.rdmafault import tcplan
from labctl.rdmafault.fault_spec import FaultMatch, FaultSpec
from labctl.store.labdir import find_labdir
from labctl.store.state import NodeStatus, atomic_write

FAULTS_FILE = "faults.json"
FAULTS_LOCK = ".faults.lock"
NODE_SECONDS = 60.0
# At most one fault a band on each end of each link; a file with more was not labctl's.
MAX_FAULTS = 4096
_GATE_SOURCE = resources.files("labctl.nodeside").joinpath("faultgate.py")


class FaultAdded(TypedDict):
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


class FaultList(TypedDict):
    """`labctl fault list --json`."""

    lab: str
    faults: list[FaultRecord]


@dataclass(frozen=True)
class Fault:
    id: int
    node: str
    interface: str
    band: int
    spec: FaultSpec

    def to_json(self) -> FaultAdded:
        return FaultAdded(id=self.id, node=self.node, interface=self.interface,
                          band=self.band, spec=self.spec.to_json(),
                          description=self.spec.describe())


def _path(handle: LabHandle) -> Path:
    return handle.labdir.path / FAULTS_FILE


def _faults_lock(handle: LabHandle) -> contextlib.AbstractContextManager[None]:
    """Held while faults.json is read, the nodes changed and the file written again: two
    `fault add` at once would otherwise pick the same id and band, and one record lose the
    other's fault (which `down` still removes with the node, but `fault clear` would miss)."""
    return blocking_lock(handle.labdir.path / FAULTS_LOCK)


# (`fault clear` reads the same file: it cannot be the way out of a file it cannot read)
_UNREADABLE_HINT = ("remove that file to forget the lab's faults; the faults themselves go "
                    "with the nodes at `labctl down` (or a node's `labctl stop`)")


def load_faults(handle: LabHandle) -> list[Fault]:
    """The lab's faults.json: data from its directory, read bounded and checked field by
    field (nodes and interfaces of this lab only), as every lab file is."""
    path = _path(handle)
    if not os.path.lexists(path):
        return []
    try:
        record = bounded.load_object(bounded.read_regular(path))
        faults = record.get("faults")
        if not isinstance(faults, list):
            raise ValueError("no list of faults")
        if len(faults) > MAX_FAULTS:
            raise ValueError(f"{len(faults)} faults (labctl records at most {MAX_FAULTS})")
        checked = [_checked_fault(handle, f) for f in faults]
        _refuse_repeats(checked)
        return checked
    except OSError as exc:  # a socket or a name too long to open: not a file labctl wrote
        raise LabctlError(f"cannot read {path}: {exc.strerror or exc}",
                          hint=_UNREADABLE_HINT) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise LabctlError(f"cannot read {path}: {exc}", hint=_UNREADABLE_HINT) from None


def _refuse_repeats(faults: list[Fault]) -> None:
    """labctl gives each fault its own id and band: a file repeating either was not
    labctl's (and this also bounds a file to the lab's interfaces times its bands)."""
    ids = {f.id for f in faults}
    places = {(f.node, f.interface, f.band) for f in faults}
    if len(ids) < len(faults) or len(places) < len(faults):
        raise ValueError("two faults share an id or a band")


def _save(handle: LabHandle, faults: list[Fault]) -> None:
    atomic_write(_path(handle), json.dumps({"faults": [f.to_json() for f in faults]},
                                           indent=2) + "\n")


def check_provider(handle: LabHandle) -> None:
    """Refuse (exit 2) where a fault cannot be put into the node's kernel."""
    capabilities = handle.provider.capabilities
    if not capabilities.node_bpf:
        raise UnsupportedError(
            f"faults are not supported on {capabilities.kind} labs: a fault's gate is an "
            "eBPF program "
            "and labctl's containers have NET_ADMIN only (no CAP_BPF or CAP_SYS_ADMIN to "
            "load it or mount /sys/fs/bpf)",
            hint="use a qemu lab (`labctl up two-node`), or `labctl link set --loss` for "
            "random loss")


def check_running(handle: LabHandle, node: str) -> None:
    """Refuse (exit 2) a node that is not running: nothing could be put on it."""
    states = {n.name: n for n in handle.provider.nodes()}
    runtime = states.get(node)
    if runtime is None or runtime.state != NodeStatus.RUNNING:
        state = runtime.state.value if runtime else "absent"
        raise UsageError(f"node {node} of lab {handle.lab.name} is {state}, not running",
                         hint=f"`labctl start {node} --lab {handle.lab.name}` starts it; "
                         "`labctl status` shows the lab")


def run_gate(handle: LabHandle, node: str, doing: str, *args: str) -> Any:
    """The fault gate's answer to `args` in `node` (its reply's payload), or LabctlError
    saying "cannot DOING NODE" and why."""
    result = handle.run(node, ["python3", "-", *args], input=_GATE_SOURCE.read_text(),
                        timeout=NODE_SECONDS)
    return read_reply(result, sender=node, doing=doing,
                      hint=f"`labctl exec {node} -- dmesg` may say why")


def _gate_removed(handle: LabHandle, node: str, *names: str) -> bool:
    try:
        run_gate(handle, node, "remove the fault's gate in", "remove", *names)
    except LabctlError:
        return False
    return True


def _why(result: subprocess.CompletedProcess[str]) -> str:
    return (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1][:300]


def add_fault(handle: LabHandle, node: str, ifname: str, spec: FaultSpec) -> Fault:
    check_provider(handle)
    check_running(handle, node)
    with _faults_lock(handle):
        return _add_locked(handle, node, ifname, spec)


def _add_locked(handle: LabHandle, node: str, ifname: str, spec: FaultSpec) -> Fault:
    faults = load_faults(handle)
    used = {f.band for f in faults if (f.node, f.interface) == (node, ifname)}
    free = [b for b in range(tcplan.FIRST_BAND, tcplan.LAST_BAND + 1) if b not in used]
    if not free:
        raise UsageError(f"{node}:{ifname} has {len(used)} faults, the most it can hold",
                         hint=f"`labctl fault clear {node}:{ifname}` or clear one by --id")
    fault = Fault(max((f.id for f in faults), default=0) + 1, node, ifname, free[0], spec)
    name = tcplan.pin_name(fault.id)
    try:
        run_gate(handle, node, "load the fault's gate in", "load", name, *spec.gate_words())
    except LabctlError:
        _gate_removed(handle, node, name)
        raise
    script = tcplan.install_script(ifname, fault.band, fault.id, spec)
    result = handle.run(node, ["sh", "-c", script], timeout=NODE_SECONDS)
    if result.returncode != 0:
        _take_off(handle, fault, last_on_interface=not used)
        if result.returncode == tcplan.ROOT_IS_NETEM_EXIT:
            raise UsageError(f"{node}:{ifname} has `labctl link set` loss or delay",
                             hint=f"`labctl link set {node}:{ifname} --clear` first "
                             "(a fault and link netem do not mix)")
        raise LabctlError(f"tc in {node} refused the fault: {_why(result)}")
    _save(handle, [*faults, fault])
    return fault


def _take_off(handle: LabHandle, fault: Fault, last_on_interface: bool) -> bool:
    script = tcplan.remove_script(fault.interface, fault.band, last_on_interface)
    removed = handle.run(fault.node, ["sh", "-c", script], timeout=NODE_SECONDS)
    unpinned = _gate_removed(handle, fault.node, tcplan.pin_name(fault.id))
    return removed.returncode == 0 and unpinned


def _take_off_all(handle: LabHandle, node: str, faults: list[Fault], kept: list[Fault]) -> bool:
    """Take `faults` (all on `node`) off in one tc script and one gate command: 4,096
    faults one by one were 8,192 node commands of up to a minute each. An interface's
    root prio goes with its last fault (none of `kept` on it)."""
    parts: list[str] = []
    for index, fault in enumerate(faults):
        still_on = kept + faults[index + 1:]  # the root prio stays while any is
        last = all((f.node, f.interface) != (fault.node, fault.interface) for f in still_on)
        # each fault's steps in a subshell: one that fails does not stop the others
        parts.append(f"( {tcplan.remove_script(fault.interface, fault.band, last)} ) "
                     "|| failed=1")
    script = "failed=0\n" + "\n".join(parts) + "\nexit $failed\n"
    removed = handle.run(node, ["sh", "-c", script], timeout=NODE_SECONDS)
    unpinned = _gate_removed(handle, node, *(tcplan.pin_name(f.id) for f in faults))
    return removed.returncode == 0 and unpinned


def clear_faults(handle: LabHandle, endpoint: tuple[str, str] | None = None,
                 fault_id: int | None = None) -> list[Fault]:
    """Take off the faults chosen (all by default); return them. Faults on a node that
    does not answer are kept, and LabctlError says so after the rest are off."""
    with _faults_lock(handle):
        return _clear_locked(handle, endpoint, fault_id)


def _clear_locked(handle: LabHandle, endpoint: tuple[str, str] | None,
                  fault_id: int | None) -> list[Fault]:
    faults = load_faults(handle)
    chosen = [f for f in faults
              if (endpoint is None or (f.node, f.interface) == endpoint)
              and (fault_id is None or f.id == fault_id)]
    if fault_id is not None and not chosen:
        raise UsageError(f"lab {handle.lab.name} has no fault {fault_id}",
                         hint="`labctl fault list` shows them")
    kept = [f for f in faults if f not in chosen]
    failed: list[Fault] = []
    for node in sorted({f.node for f in chosen}):  # two node commands a node, not a fault
        on_node = [f for f in chosen if f.node == node]
        if not _take_off_all(handle, node, on_node, kept):
            failed += on_node
    _save(handle, kept + failed)
    if failed:
        raise LabctlError(f"could not remove fault(s) {', '.join(str(f.id) for f in failed)}"
                          " (their node did not answer)",
                          hint="`labctl status`; `labctl down` removes everything anyway")
    return [f for f in chosen if f not in failed]


def _checked_fault(handle: LabHandle, record: Any) -> Fault:
    if not isinstance(record, dict):
        raise ValueError("a fault is not an object")
    node, interface, fault_id, band = (record.get(k) for k in ("node", "interface", "id", "band"))
    if node not in handle.node_names():
        raise ValueError(f"a fault on a node the lab does not have: {short_repr(node)}")
    if interface not in [i.name for i in handle.lab.node(node).interfaces]:
        raise ValueError(f"a fault on an interface {node} does not have: {short_repr(interface)}")
    if not (type(fault_id) is int and 1 <= fault_id <= 1 << 30):
        raise ValueError("a fault's id is not a whole number")
    if not (type(band) is int and tcplan.FIRST_BAND <= band <= tcplan.LAST_BAND):
        raise ValueError("a fault's band is not one of the prio bands")
    return Fault(fault_id, node, interface, band, FaultSpec.from_json(record.get("spec")))


def fault_counts(handle: LabHandle, faults: list[Fault]) -> dict[int, list[int] | None]:
    """(matched, hit) packets of each fault, read from its gate in the node; None where
    the gate is gone (the node restarted) or the node does not answer."""
    counts: dict[int, list[int] | None] = {f.id: None for f in faults}
    for node in sorted({f.node for f in faults}):
        ids = [f.id for f in faults if f.node == node]
        try:
            reply = run_gate(handle, node, "read the fault counts of", "read",
                             *(tcplan.pin_name(i) for i in ids))
        except LabctlError:
            continue
        if not isinstance(reply, dict):
            continue
        for fault_id in ids:
            value = reply.get(tcplan.pin_name(fault_id))
            if (isinstance(value, list) and len(value) == 2
                    and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
                counts[fault_id] = value
    return counts


def list_record(lab: str | None) -> FaultList:
    """What `fault list --json` prints (docs/json.md)."""
    handle = LabHandle(find_labdir(lab))
    faults = load_faults(handle)
    counts = fault_counts(handle, faults) if faults else {}
    rows: list[FaultRecord] = []
    for fault in faults:
        matched, hit = counts.get(fault.id) or (None, None)
        rows.append(FaultRecord(**fault.to_json(), matched=matched, hit=hit))
    return FaultList(lab=handle.lab.name, faults=rows)
