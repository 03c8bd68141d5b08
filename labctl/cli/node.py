"""`labctl stop|start|restart NODE`: one node of a lab down and up again, the rest running.

A stopped node looks to its peers as a crashed one (no shutdown, its links drop); `start`
brings it back as `up` repairs a lab (same disk, addresses and MACs) and waits until its
RDMA device is ACTIVE. The work is labctl.lab.lifecycle's; this module only parses and
prints."""

from __future__ import annotations

import typer

from labctl.cli.common import LabOption, NodeArgument, console, progress_reporter, seconds
from labctl.lab import lifecycle
from labctl.store.labdir import find_labdir

TimeoutOption = typer.Option(300, help="Seconds to wait for the node to be ready.",
                             metavar="SECONDS", callback=seconds("timeout"))


def stop(node: str = NodeArgument, lab: str = LabOption) -> None:
    """Stop one node as a crash would (its peers see its links go); the rest runs on."""
    labdir = find_labdir(lab)
    lifecycle.stop_node(labdir, node)
    console.print(f"lab {labdir.name}: [bold]{node} stopped[/]; "
                  f"`labctl start {node} --lab {labdir.name}` starts it again", soft_wrap=True)


def start(node: str = NodeArgument, lab: str = LabOption,
          timeout: float = TimeoutOption) -> None:
    """Start a stopped node again (same disk and addresses) and wait for its RDMA device."""
    labdir = find_labdir(lab)
    with progress_reporter(f"start {node}") as progress:
        lifecycle.start_node(labdir, node, timeout, progress)
    console.print(f"lab {labdir.name}: [bold green]{node} is up[/]")


def restart(node: str = NodeArgument, lab: str = LabOption,
            timeout: float = TimeoutOption) -> None:
    """Stop one node and start it again (a stopped node is only started)."""
    labdir = find_labdir(lab)
    with progress_reporter(f"restart {node}") as progress:
        lifecycle.restart_node(labdir, node, timeout, progress)
    console.print(f"lab {labdir.name}: [bold green]{node} restarted[/]")


def register(app: typer.Typer) -> None:
    for command in (stop, start, restart):
        app.command()(command)
