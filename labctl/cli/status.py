"""`labctl status`: each node's state, addresses and RDMA device, live."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table

from labctl.cli.common import LabOption, console, err_console
from labctl.lab.handle import LabHandle
from labctl.lab.labdir import LabDir, find_labdir, running_labs
from labctl.lab.state import LabState, NodeStatus, Phase


def _recorded_devices(state: LabState, node: str) -> dict[str, Any]:
    """The node's device as its ready line reported it at boot (see node-init.sh)."""
    info = state.nodes.get(node)
    if info is None or not info.rdma_dev:
        return {}
    return {"devices": [{"name": info.rdma_dev, "port_state": info.port_state or "?",
                         "active_mtu": info.active_mtu, "gid_index": info.gid_index}]}


def collect_status(handle: LabHandle, live: bool = True) -> dict[str, Any]:
    """Provider view plus, for running nodes, what the node itself reports.

    With live=False the node's own report is the one it gave when it became ready.
    """
    state = handle.labdir.load_state()  # a corrupt state.json: CorruptStateError (exit 1)
    runtimes = handle.provider.nodes()
    running = [r.name for r in runtimes if r.state == NodeStatus.RUNNING]
    live_info: dict[str, Any] = (handle.all_node_status(running) if live else
                                 {n: _recorded_devices(state, n) for n in running})
    nodes = []
    for runtime in runtimes:
        node = handle.lab.node(runtime.name)
        record: dict[str, Any] = {
            "name": node.name,
            "state": str(runtime.state),
            "reason": runtime.reason,
            "rdma": node.rdma,
            "interfaces": [{"name": i.name, "ipv4": i.ipv4, "mac": i.mac} for i in node.interfaces],
            **runtime.details,
        }
        info = live_info.get(node.name)
        if isinstance(info, str):
            record["reason"] = info
        elif info:
            record["devices"] = info["devices"]
            if "interfaces" in info:
                record["live_interfaces"] = info["interfaces"]
        nodes.append(record)
    return {
        "lab": handle.lab.name,
        "provider": handle.lab.provider,
        "phase": str(state.phase),
        "ready_seconds": state.ready_seconds,
        "nodes": nodes,
    }


def _table(status: dict[str, Any]) -> Table:
    table = Table(title=f"lab {status['lab']} ({status['provider']}, {status['phase']})")
    for column in (
        "node",
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
        devices = node.get("devices") or [{}]
        device = devices[0]
        state = node["state"] + (f" ({node['reason']})" if node.get("reason") else "")
        color = "green" if node["state"] == "running" else "red"
        table.add_row(
            node["name"],
            f"[{color}]{state}[/]",
            node.get("ssh", ""),
            "\n".join(f"{i['name']} {i['ipv4']}" for i in node["interfaces"]),
            f"{device.get('name', '-')} ({node['rdma']})" if device else node["rdma"],
            device.get("port_state", "-"),
            device.get("active_mtu", "-") or "-",
            "-" if device.get("gid_index") is None else str(device["gid_index"]),
        )
    return table


def print_status(labdir: LabDir, live: bool = True) -> None:
    console.print(_table(collect_status(LabHandle(labdir), live=live)))


def status(
    lab: str = LabOption,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show the nodes of a lab with their state, addresses and RDMA devices."""
    if lab is None and not running_labs():
        if as_json:
            print(json.dumps({"labs": []}))
        else:
            console.print("no lab is up")
        return
    handle = LabHandle(find_labdir(lab))
    result = collect_status(handle)
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        console.print(_table(result))
    if result["phase"] != Phase.UP:  # an interrupted up or repair: some step never ran
        err_console.print(f"lab {result['lab']}: `up` did not finish (phase {result['phase']});"
                          f" `labctl down --lab {result['lab']}` removes it")
    if result["phase"] != Phase.UP or any(n["state"] != NodeStatus.RUNNING
                                          for n in result["nodes"]):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(status)
