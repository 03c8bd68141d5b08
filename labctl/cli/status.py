"""`labctl status`: each node's state, addresses and RDMA device, live."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from labctl.cli.common import console, err_console, lab_option
from labctl.cli.safeprint import print_json
from labctl.cli.shapes import StatusOutput
from labctl.lab.status import (
    LabBusy,
    LabStatusRecord,
    NodeKernel,
    is_finished,
    is_healthy,
    kernel_source_words,
    labs_status,
)


def _busy_words(busy: LabBusy) -> str:
    """"being created by pid 123" (or "by another labctl" when lock.owner does not say)."""
    verb = {"creating": "created", "removing": "removed", "repairing": "repaired"}
    by = f"pid {busy['pid']}" if busy["pid"] is not None else "another labctl"
    return f"being {verb[busy['action']]} by {by}"


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
    return f"{kernel['release'] or '-'} ({kernel_source_words(kernel['source'])})"


def print_status(status: LabStatusRecord) -> None:
    console.print(_table(status))


def status(
    lab: str = lab_option("Lab name (default: every lab that is up)."),
    as_json: bool = typer.Option(
        False, "--json",
        help="Print JSON: an object whose list `labs` has one record per lab (docs/json.md)."),
) -> None:
    """Show the nodes of every lab that is up (or of --lab) with their state, addresses and
    RDMA devices; exit 1 when a node is not running or an `up` did not finish."""
    results = labs_status(lab)
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
        elif not is_finished(result):  # an interrupted up or repair: some step never ran
            err_console.print(f"lab {result['lab']}: `up` did not finish (phase"
                              f" {result['phase']}); `labctl down --lab {result['lab']}` removes"
                              " it")
    if not all(is_healthy(r) for r in results):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(status)
