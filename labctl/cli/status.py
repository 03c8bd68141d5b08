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
from labctl.lab.status import LabBusy, LabStatusRecord, is_finished, is_healthy, labs_status


def _busy_words(busy: LabBusy) -> str:
    """"being created by pid 123" (or "by another labctl" when lock.owner does not say)."""
    verb = {"creating": "created", "removing": "removed", "repairing": "repaired"}
    by = f"pid {busy['pid']}" if busy["pid"] is not None else "another labctl"
    return f"being {verb[busy['action']]} by {by}"


def _table(status: LabStatusRecord) -> Table:
    holder = status.get("busy")
    busy = f", {_busy_words(holder)}" if holder else ""
    table = Table(title=f"lab {status['lab']} ({status['provider']}, {status['phase']}{busy})")
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
    ):
        table.add_column(column)
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
        )
    return table


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
