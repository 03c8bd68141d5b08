"""`labctl down`: remove every trace of a lab (idempotent)."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from labctl.cli import complete
from labctl.cli.common import LabOption, console
from labctl.errors import LabctlError
from labctl.lab.labdir import LabDir, running_labs
from labctl.net import labnet
from labctl.providers import provider_for
from labctl.topology.catalog import find_topology
from labctl.topology.model import LAB_NAME_RE
from labctl.topology.resolved import Lab


def _name_from_topology(path: Path) -> str:
    """The lab name in a topology file, read with the topology loader's bounds (regular
    file, size, depth): a binary file, a FIFO or /dev/zero exit 2 with a message."""
    from labctl.topology.load import read_lab_name

    return read_lab_name(path)


def destroy_lab(name: str) -> list[str]:
    """Remove lab `name`: processes, network namespace, lab directory."""
    labdir = LabDir(name)
    removed: list[str] = []
    if not labdir.path.exists():
        if labnet.delete_netns(labnet.netns_name(name)):
            removed.append(f"netns {labnet.netns_name(name)}")
        return removed
    with labdir.locked("down"):
        if labdir.lab_file.is_file():
            lab = labdir.load_lab()
        else:  # up died before writing lab.json: destroy from state alone
            state = labdir.load_state()
            lab = Lab(name, state.get("provider", "qemu"), "", (), ())
        removed += provider_for(lab, labdir).destroy()
        if labnet.delete_netns(labnet.netns_name(name)):
            removed.append(f"netns {labnet.netns_name(name)}")
    if labdir.remove():
        removed.append(f"lab directory {labdir.path}")
    return removed


def down(
    topology: str = typer.Argument(None, help="Topology file of the lab, or a shipped "
                                   "topology's name (or use --lab).", metavar="TOPOLOGY",
                                   autocompletion=complete.topologies),
    lab: str = LabOption,
    all_labs: bool = typer.Option(False, "--all", help="Remove every lab."),
) -> None:
    """Stop the lab's nodes and remove everything it made."""
    if all_labs:
        names = sorted(
            set(running_labs())
            | {ns.removeprefix(labnet.NETNS_PREFIX) for ns in labnet.lab_namespaces()}
        )
        names = [n for n in names if re.fullmatch(LAB_NAME_RE, n)]  # never a path like ".."
    elif lab or topology:
        names = [lab or _name_from_topology(find_topology(topology))]
    else:
        names = running_labs()
        if len(names) > 1:
            raise LabctlError(
                f"several labs are up ({', '.join(names)})",
                hint="choose one with --lab NAME, or --all",
            )
    if not names:
        console.print("no lab is up; nothing to remove")
        return
    for name in names:
        removed = destroy_lab(name)
        if removed:
            console.print(f"[bold]lab {name}[/] removed: " + ", ".join(removed))
        else:
            console.print(f"lab {name}: nothing to remove")


def register(app: typer.Typer) -> None:
    app.command()(down)
