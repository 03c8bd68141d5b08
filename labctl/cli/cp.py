"""`labctl cp SRC NODE:DST`, `labctl cp NODE:SRC DST`: files and directories between the
host and a node (a tar stream over the node's exec channel: ssh, or `docker exec`)."""

from __future__ import annotations

import time

import typer

from labctl.cli.common import LabOption, console, err_console, seconds
from labctl.cli.report import on_interrupt
from labctl.cli.safeprint import print_json
from labctl.cli.shapes import CopyOutput
from labctl.lab.handle import open_lab
from labctl.lab.transfer import copy_from_node, copy_to_node, parse_copy


def cp(
    src: str = typer.Argument(..., metavar="SRC", help="Host path, or NODE:/path in the node."),
    dst: str = typer.Argument(..., metavar="DST", help="Host path, or NODE:/path in the node."),
    timeout: float = typer.Option(600, "--timeout", help="Seconds the copy may take.",
                                  metavar="SECONDS", callback=seconds("timeout")),
    lab: str = LabOption,
    as_json: bool = typer.Option(False, "--json", help="Print JSON (docs/json.md)."),
) -> None:
    """Copy a file or directory (recursively) between the host and a node; exactly one of
    SRC and DST is NODE:/absolute/path. A DST that is a directory receives SRC by its
    name; otherwise SRC is written as DST."""
    started = time.monotonic()
    request = parse_copy(src, dst)  # bad arguments exit 2 before the lab is opened
    handle = open_lab(lab)
    handle.argv(request.node, [])  # an unknown node: exit 2, nothing copied
    on_interrupt("the lab is untouched, do not `labctl down` it; " + (
        f"DST in {request.node} is as it was, but for a hidden .labctl-cp.* directory "
        "beside it if the node's side could not remove it" if request.to_node
        else "nothing was written at DST on the host"))
    skipped: str | None = None
    if request.to_node:
        where = copy_to_node(handle, request, timeout)
    else:
        where, skipped = copy_from_node(handle, request, timeout)
        if skipped and not as_json:
            err_console.print(f"labctl cp: {skipped}", markup=False, soft_wrap=True)
    if as_json:
        record: CopyOutput = {
            "lab": handle.lab.name, "node": request.node,
            "direction": "to-node" if request.to_node else "from-node",
            "source": src, "destination": where, "skipped": skipped,
            "seconds": round(time.monotonic() - started, 1)}
        print_json(record)
        return
    console.print(f"copied {src} -> {where}", markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command()(cp)
