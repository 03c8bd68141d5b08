"""Restored nodes get their identity: once qemu has loaded the saved machine and runs it,
labctl sends each node its message on the node's ttyS1 (labctl/nodeside/identity.py) and
reads its answer. A node whose qemu refused the state, or that does not answer, is named
with the reason: the caller boots it cold."""

from __future__ import annotations

import contextlib
import shlex
import socket
import time
from pathlib import Path

from labctl.errors import LabctlError
from labctl.node.env import mgmt_mac
from labctl.store.state import LabState
from labctl.topology.resolved import Lab, Node
from labctl.vm.machine import QemuMachine, tail
from labctl.vm.saved import IGNORE_SHARED, TEMPLATE_MGMT_MAC, template_mac

RESTORE_SECONDS = 60.0  # qemu loading the state, under TCG load
ANSWER_SECONDS = 60.0  # the node's answer to its identity
ANSWER_BYTES = 512
REFUSED = "qemu refused the saved machine"


def restored_nodes(state: LabState) -> list[str]:
    """The nodes whose qemu was last started from a saved machine (a node that fell back
    to a cold boot, or was started again by a repair, was started without -incoming)."""
    return sorted(name for name, info in state.nodes.items() if "-incoming" in info.argv)


def restored_macs(lab: Lab, node: Node) -> list[tuple[str, str]]:
    """(saved machine's MAC, node's MAC) of each NIC, management NIC first."""
    return [(TEMPLATE_MGMT_MAC, mgmt_mac(lab.name, node))] + [
        (template_mac(k), iface.mac) for k, iface in enumerate(node.interfaces)]


def _refused(machine: QemuMachine) -> str:
    """Why a restored node's qemu is gone: the end of its log."""
    log = tail(machine.qemu_log, 3).strip().replace("\n", " / ")
    return f"{REFUSED} ({log[:300] or 'qemu exited'})"


def _load(machine: QemuMachine, pid: int, state_file: Path, deadline: float) -> str | None:
    """Have qemu (-incoming defer) load the saved devices, its RAM being the saved file
    (x-ignore-shared, as when it was saved); None once it loads, else why not."""
    while time.monotonic() < deadline:
        if not machine.owns(pid):
            return _refused(machine)
        try:
            machine.qmp("migrate-set-capabilities", capabilities=[IGNORE_SHARED])
        except LabctlError:  # its QMP socket may not be there yet
            time.sleep(0.02)
            continue
        try:
            # exec: runs /bin/sh -c: the path (labctl's own cache, never state.json's) is quoted
            machine.qmp("migrate-incoming", uri=f"exec:cat {shlex.quote(str(state_file))}")
        except LabctlError as exc:
            return f"{REFUSED} ({exc.message[:300]})"
        return None
    return f"qemu did not take the saved machine within {RESTORE_SECONDS:.0f} s"


def _running(machine: QemuMachine, pid: int, deadline: float) -> str | None:
    """None once qemu runs the restored machine; else why not."""
    while time.monotonic() < deadline:
        if not machine.owns(pid):
            return _refused(machine)
        with contextlib.suppress(LabctlError):  # its QMP socket may not be there yet
            status = machine.qmp("query-status")
            now = status.get("status") if isinstance(status, dict) else None
            if now == "running":
                return None
            if now == "paused":  # loaded: the machine was saved stopped (one pass)
                machine.qmp("cont")
                continue  # running now: the next query says so
        # loading the devices takes some 50 ms (the RAM is the saved file): a short poll,
        # one QMP round trip of a few ms, since every node of an `up` waits here in turn
        time.sleep(0.01)
    return f"qemu did not run the saved machine within {RESTORE_SECONDS:.0f} s"


def _send(machine: QemuMachine, message: bytes) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(10)
        sock.connect(str(machine.identity_socket))
        sock.sendall(message)
    except OSError:
        sock.close()
        raise
    return sock


def _answer(sock: socket.socket, deadline: float) -> str | None:
    """None when the node said ok; else why not (its answer is data: bounded, one line)."""
    data = b""
    while b"\n" not in data and len(data) < ANSWER_BYTES:
        left = deadline - time.monotonic()
        if left <= 0:
            return f"no answer to its identity within {ANSWER_SECONDS:.0f} s"
        sock.settimeout(left)
        try:
            chunk = sock.recv(ANSWER_BYTES)
        except TimeoutError:
            continue
        except OSError as exc:
            return f"its identity port failed: {exc}"
        if not chunk:
            return "its identity port closed without an answer"
        data += chunk
    line = data.split(b"\n")[0].decode("utf-8", "replace")[:300]
    return None if line == "ok" else f"it refused its identity: {line!r}"


def give_identities(machines: dict[str, QemuMachine], state: LabState,
                    state_files: dict[str, Path],
                    identities: dict[str, bytes]) -> dict[str, str]:
    """Have each restored node (the keys of `identities`) load its saved state, then send
    it its identity; the nodes that failed, with why."""
    failed: dict[str, str] = {}
    sockets: dict[str, socket.socket] = {}
    deadline = time.monotonic() + RESTORE_SECONDS
    for name in identities:  # every node loads at once
        why = _load(machines[name], state.nodes[name].pid, state_files[name], deadline)
        if why is not None:
            failed[name] = why
    try:
        for name, message in identities.items():
            if name in failed:
                continue
            why = _running(machines[name], state.nodes[name].pid, deadline)
            if why is None:
                try:
                    sockets[name] = _send(machines[name], message)
                except OSError as exc:
                    why = f"cannot send its identity: {exc}"
            if why is not None:
                failed[name] = why
        deadline = time.monotonic() + ANSWER_SECONDS
        for name, sock in sockets.items():
            why = _answer(sock, deadline)
            if why is not None:
                failed[name] = why
    finally:
        for sock in sockets.values():
            sock.close()
    return failed
