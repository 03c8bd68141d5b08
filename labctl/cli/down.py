"""`labctl down`: remove every trace of a lab (idempotent)."""

from __future__ import annotations

import re
from pathlib import Path

import typer
import yaml

from labctl.cli.common import LabOption, console
from labctl.errors import LabctlError, UsageError
from labctl.lab.labdir import running_labs
from labctl.lab.lifecycle import destroy
from labctl.net import labnet
from labctl.topology.model import LAB_NAME_RE


def _name_from_topology(path: Path) -> str:
    try:
        data = yaml.safe_load(path.read_text())
        return str(data["name"])
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError, KeyError,
            TypeError) as exc:
        raise UsageError(
            f"cannot read the lab name from {path}: {str(exc)[:200]}", hint="use --lab NAME"
        ) from None


def down(
    topology: Path = typer.Argument(None, help="Topology file of the lab (or use --lab)."),
    lab: str = LabOption,
    all_labs: bool = typer.Option(False, "--all", help="Remove every lab."),
) -> None:
    """Stop the lab's nodes and remove everything it made."""
    if all_labs:
        names = sorted(
            set(running_labs())
            | {ns.removeprefix(labnet.NETNS_PREFIX) for ns in labnet.lab_namespaces()}
        )
        names = [n for n in names if re.match(LAB_NAME_RE, n)]  # never a path like ".."
    elif lab or topology:
        names = [lab or _name_from_topology(topology)]
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
        removed = destroy(name)
        if removed:
            console.print(f"[bold]lab {name}[/] removed: " + ", ".join(removed))
        else:
            console.print(f"lab {name}: nothing to remove")


def register(app: typer.Typer) -> None:
    app.command()(down)
