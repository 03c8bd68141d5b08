"""`labctl topologies`: the topologies labctl ships, usable by name (`labctl up two-node`)."""

from __future__ import annotations

import typer
from rich.table import Table

from labctl.cli.common import console


def topologies() -> None:
    """List the shipped topologies: `labctl up NAME` and `labctl validate NAME` take them."""
    from labctl.errors import LabctlError
    from labctl.topology.catalog import shipped
    from labctl.topology.load import load_lab

    table = Table(title="shipped topologies (labctl up NAME)")
    for column in ("name", "nodes", "rdma", "provider", "file"):
        table.add_column(column, overflow="fold")
    for topology in shipped():
        try:
            lab = load_lab(topology.path)
        except LabctlError as exc:  # a broken installation: say so, list the rest
            table.add_row(topology.name, "-", "-", "-", f"{topology.path} ({exc.message})")
            continue
        rdma = sorted({n.rdma for n in lab.nodes})
        table.add_row(topology.name, str(len(lab.nodes)), ", ".join(rdma), lab.provider,
                      str(topology.path))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("topologies")(topologies)
