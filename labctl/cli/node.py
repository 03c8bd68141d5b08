"""`labctl stop|start|restart NODE`: one node of a lab down and up again, the rest running.

A stopped node looks to its peers as a crashed one (no shutdown, its links drop); `start`
brings it back as `up` repairs a lab (same disk, addresses and MACs) and waits until its
RDMA device is ACTIVE. The work is labctl.lab.lifecycle's; this module only parses and
prints."""

from __future__ import annotations

import time
from typing import Literal

import typer

from labctl.cli.common import LabOption, NodeArgument, console, progress_reporter, seconds
from labctl.cli.report import on_interrupt
from labctl.cli.safeprint import print_json
from labctl.cli.shapes import NodeActionOutput
from labctl.lab import lifecycle
from labctl.lab.labs import find_labdir

TimeoutOption = typer.Option(300, help="Seconds to wait for the node to be ready.",
                             metavar="SECONDS", callback=seconds("timeout"))
JsonOption = typer.Option(False, "--json", help="Print JSON (docs/json.md).")


def _node_interrupted(lab: str, node: str) -> str:
    """Ctrl-C in stop, start or restart: only that node may be half-way; the rest runs on."""
    return (f"only {node} of lab {lab} may be half-way (the other nodes run on): "
            f"`labctl restart {node} --lab {lab}` brings it back")


def _print_json(lab: str, node: str, action: Literal["stopped", "started", "restarted"],
                started: float) -> None:
    record: NodeActionOutput = {"lab": lab, "node": node, "action": action,
                                "seconds": round(time.monotonic() - started, 1)}
    print_json(record)


def stop(node: str = NodeArgument, lab: str = LabOption, as_json: bool = JsonOption) -> None:
    """Stop one node as a crash would (its peers see its links go); the rest runs on."""
    started = time.monotonic()
    labdir = find_labdir(lab)
    on_interrupt(_node_interrupted(labdir.name, node))
    lifecycle.stop_node(labdir, node)
    if as_json:
        _print_json(labdir.name, node, "stopped", started)
        return
    console.print(f"lab {labdir.name}: [bold]{node} stopped[/]; "
                  f"`labctl start {node} --lab {labdir.name}` starts it again", soft_wrap=True)


def start(node: str = NodeArgument, lab: str = LabOption,
          timeout: float = TimeoutOption, as_json: bool = JsonOption) -> None:
    """Start a stopped node again (same disk and addresses) and wait for its RDMA device."""
    started = time.monotonic()
    labdir = find_labdir(lab)
    on_interrupt(_node_interrupted(labdir.name, node))
    with progress_reporter(f"start {node}") as progress:
        lifecycle.start_node(labdir, node, timeout, progress)
    if as_json:
        _print_json(labdir.name, node, "started", started)
        return
    console.print(f"lab {labdir.name}: [bold green]{node} is up[/]")


def restart(node: str = NodeArgument, lab: str = LabOption,
            timeout: float = TimeoutOption, as_json: bool = JsonOption) -> None:
    """Stop one node and start it again (a stopped node is only started)."""
    started = time.monotonic()
    labdir = find_labdir(lab)
    on_interrupt(_node_interrupted(labdir.name, node))
    with progress_reporter(f"restart {node}") as progress:
        lifecycle.restart_node(labdir, node, timeout, progress)
    if as_json:
        _print_json(labdir.name, node, "restarted", started)
        return
    console.print(f"lab {labdir.name}: [bold green]{node} restarted[/]")


def register(app: typer.Typer) -> None:
    for command in (stop, start, restart):
        app.command()(command)
