"""`labctl down`: remove every trace of a lab (idempotent)."""

from __future__ import annotations

import difflib
from pathlib import Path

import typer

from labctl.cli import complete
from labctl.cli.common import LabOption, console
from labctl.cli.report import on_interrupt
from labctl.cli.safeprint import print_json
from labctl.cli.shapes import DownOutput
from labctl.errors import UsageError, short_repr
from labctl.lab.labs import DEFAULT_LAB_ENV, default_lab, every_lab, lab_made, running_labs
from labctl.lab.lifecycle import destroy
from labctl.topology.catalog import find_topology


def _name_from_topology(path: Path) -> str:
    """The lab name in a topology file, read with the topology loader's bounds (regular
    file, size, depth): a binary file, a FIFO or /dev/zero exit 2 with a message."""
    from labctl.topology.load import read_lab_name

    return read_lab_name(path)


def _down_interrupted(names: list[str]) -> str:
    """Ctrl-C in down: the labs not yet fully removed, and the command that finishes."""
    left = [n for n in names if lab_made(n)]
    if not left:
        return ""
    return "; ".join(f"lab {n} may be partly removed: `labctl down --lab {n}` removes the "
                     "rest" for n in left)


def _existing(name: str, source: str = "") -> str:
    """`name` if labctl has any of that lab (a directory, even half-made; a netns left);
    else exit 2 naming the labs there are, the nearest first ("did you mean")."""
    labs = every_lab()
    if name in labs:
        return name
    near = difflib.get_close_matches(name, labs, n=3, cutoff=0.6)
    hint = (f"did you mean {' or '.join(near)}? " if near else "") + (
        f"labs: {', '.join(labs)}" if labs else "no lab exists; nothing to remove")
    raise UsageError(f"no lab named {short_repr(name)}{source}", hint=hint)


def down(
    topology: str = typer.Argument(None, help="Topology file of the lab, or a shipped "
                                   "topology's name (or use --lab).", metavar="TOPOLOGY",
                                   autocompletion=complete.topologies),
    lab: str = LabOption,
    all_labs: bool = typer.Option(False, "--all", help="Remove every lab."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON: what was removed, per "
                                 "lab (docs/json.md)."),
) -> None:
    """Stop the lab's nodes and remove everything it made."""
    if all_labs:
        names = every_lab()
    elif lab:
        names = [_existing(lab)]
    elif topology:
        names = [_name_from_topology(find_topology(topology))]
    elif default_lab() is not None:
        names = [_existing(default_lab() or "", f" ({DEFAULT_LAB_ENV} names it)")]
    else:
        names = running_labs()
        if len(names) > 1:
            raise UsageError(
                f"several labs are up ({', '.join(names)})",
                hint=f"choose one with --lab NAME, or --all, or set {DEFAULT_LAB_ENV}=NAME",
            )
    on_interrupt(lambda: _down_interrupted(names))
    if as_json:
        output: DownOutput = {"labs": [{"lab": n, "removed": destroy(n)} for n in names]}
        print_json(output)
        return
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
