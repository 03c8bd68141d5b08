"""`labctl status`: each node's state, addresses and RDMA device, live."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, Literal

import typer
from rich.table import Table
from rich.text import Text

from labctl.cli.common import console, err_console, lab_option
from labctl.cli.safeprint import print_json
from labctl.cli.shapes import LabBusy, LabStatusRecord, NodeKernel, NodeRecord, StatusOutput
from labctl.errors import LabctlError, UsageError
from labctl.lab.handle import LabHandle
from labctl.node.replies import UnreadableReply
from labctl.store.labdir import LabDir, LockHolder, running_labs
from labctl.store.state import CorruptStateError, LabState, NodeStatus, Phase


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
    The record has the same shape whatever the provider.
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


def _busy(holder: LockHolder | None, phase: str) -> LabBusy | None:
    """The `busy` record of a lab whose lock is held."""
    if holder is None:
        return None
    action: Literal["creating", "repairing", "removing"] = (
        "removing" if holder.action == "down" else
        "creating" if phase in (Phase.CREATING, "?") else "repairing")
    return {"action": action, "pid": holder.pid}


def _busy_words(busy: LabBusy) -> str:
    """"being created by pid 123" (or "by another labctl" when lock.owner does not say)."""
    verb = {"creating": "created", "removing": "removed", "repairing": "repaired"}
    by = f"pid {busy['pid']}" if busy["pid"] is not None else "another labctl"
    return f"being {verb[busy['action']]} by {by}"


def _lab_status(labdir: LabDir) -> LabStatusRecord:
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


def _phase_on_disk(labdir: LabDir, holder: LockHolder | None) -> str:
    """state.json's phase while an `up` or `down` is at work on the lab ("?" when it cannot
    be read yet); "corrupt" for a lab nobody works on whose files cannot be read."""
    if holder is None:
        return "corrupt"
    try:
        return str(labdir.load_state().phase)
    except LabctlError:
        return "?"


def _table(status: LabStatusRecord) -> Table:
    holder = status.get("busy")
    busy = f", {_busy_words(holder)}" if holder else ""
    shared = _shared_kernel([node["kernel"] for node in status["nodes"]])
    # nothing to say of the image's kernel before a node has answered
    known = shared is not None and (shared["release"] or shared["source"] != "image")
    kernel = f", kernel {_kernel_words(shared)}" if shared and known else ""
    table = Table(title=f"lab {status['lab']} ({status['provider']}, {status['phase']}{busy}"
                  f"{kernel})")
    # Multi-host docker labs: which host (of the topology's `hosts:`) runs each node.
    hosts = any("host" in node["details"] for node in status["nodes"])
    for column in (
        "node",
        *(["host"] if hosts else []),
        "state",
        "management",
        "data addresses",
        "rdma device",
        "port",
        "active mtu",
        "gid index",
        *([] if shared else ["kernel"]),
    ):
        # a release is never cut short: folded onto a second line if the table is narrow
        table.add_column(column, overflow="fold" if column == "kernel" else "ellipsis")
    for node in status["nodes"]:
        device: Mapping[str, Any] = node["devices"][0] if node["devices"] else {}
        state = node["state"] + (f" ({node['reason']})" if node.get("reason") else "")
        color = "green" if node["state"] == "running" else "red"
        # Text, not markup: a reason and a device's fields are what a node said, and a
        # "[/x]" in them would be a rich MarkupError (a traceback) if parsed as markup.
        table.add_row(
            Text(node["name"]),
            *([Text(node["details"].get("host", "-"))] if hosts else []),
            Text(state, style=color),
            Text(node["management"] or "-"),
            Text("\n".join(f"{i['name']} {i['ipv4']}" for i in node["interfaces"])),
            Text(f"{device.get('name', '-')} ({node['rdma']})" if device else node["rdma"]),
            Text(device.get("port_state", "-")),
            Text(device.get("active_mtu", "-") or "-"),
            Text("-" if device.get("gid_index") is None else str(device["gid_index"])),
            *([] if shared else [Text(_kernel_words(node["kernel"]))]),
        )
    return table


def _shared_kernel(kernels: list[NodeKernel]) -> NodeKernel | None:
    """The one kernel every node runs (the title says it), or None when they differ (a
    column says each node's). A node that did not answer differs from none."""
    sources = {k["source"] for k in kernels}
    releases = {k["release"] for k in kernels if k["release"] is not None}
    if len(sources) != 1 or len(releases) > 1:
        return None
    return {"source": sources.pop(), "release": releases.pop() if releases else None}


def _kernel_words(kernel: NodeKernel) -> str:
    """"7.3.4+deb13-amd64 (image)", or for a kernel of the user's "6.12.1 (own: linux)"
    (the folder's name: `status --json` has its path); "-" for the release when the node
    was not asked."""
    source = kernel["source"]
    shown = f"own: {PurePath(source).name}" if source.startswith("/") else source
    return f"{kernel['release'] or '-'} ({shown})"


def print_status(labdir: LabDir, live: bool = True) -> None:
    console.print(_table(collect_status(LabHandle(labdir), live=live)))


def _labdirs(lab: str | None) -> list[LabDir]:
    """The lab --lab names (bad input if it is not up), else every lab that is up."""
    if lab is None:
        return [LabDir(name) for name in running_labs()]
    labdir = LabDir(lab)  # a bad name is a UsageError already
    if not labdir.path.exists():
        raise UsageError(f"no lab named {lab!r} is up",
                         hint=f"labs up: {', '.join(running_labs()) or 'none'}")
    return [labdir]


def status(
    lab: str = lab_option("Lab name (default: every lab that is up)."),
    as_json: bool = typer.Option(
        False, "--json",
        help="Print JSON: an object whose list `labs` has one record per lab (docs/json.md)."),
) -> None:
    """Show the nodes of every lab that is up (or of --lab) with their state, addresses and
    RDMA devices; exit 1 when a node is not running or an `up` did not finish."""
    results = [_lab_status(labdir) for labdir in _labdirs(lab)]
    if as_json:
        output: StatusOutput = {"labs": results}
        print_json(output)
    elif not results:
        console.print("no lab is up")
    for result in results:
        if result.get("error"):
            err_console.print(f"lab {result['lab']}: {result['error']}")
            continue
        if not as_json:
            console.print(_table(result))
        holder = result.get("busy")
        if holder:  # an `up` or `down` at work: not a lab to remove
            err_console.print(f"lab {result['lab']}: {_busy_words(holder)}; "
                              "`labctl status` again when it is done")
        elif result["phase"] != Phase.UP:  # an interrupted up or repair: some step never ran
            err_console.print(f"lab {result['lab']}: `up` did not finish (phase"
                              f" {result['phase']}); `labctl down --lab {result['lab']}` removes"
                              " it")
    if any(r["phase"] != Phase.UP or any(n["state"] != NodeStatus.RUNNING for n in r["nodes"])
           for r in results):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(status)
