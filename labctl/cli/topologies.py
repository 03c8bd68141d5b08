"""`labctl topologies`: the topologies labctl ships, usable by name (`labctl up two-node`)."""

from __future__ import annotations

import typer
from rich.table import Table

from labctl.cli.common import console
from labctl.cli.safeprint import print_json
from labctl.cli.shapes import TopologiesOutput, TopologyRow


def topology_rows() -> list[TopologyRow]:
    """One row per shipped topology; a file that does not load (a broken installation)
    keeps its row, with the error and no lab details, so the rest are still listed."""
    from labctl.errors import LabctlError
    from labctl.topology.catalog import shipped
    from labctl.topology.load import load_lab

    rows: list[TopologyRow] = []
    for topology in shipped():
        row: TopologyRow = {"name": topology.name, "file": str(topology.path),
                               "nodes": None, "rdma": [], "provider": None, "error": ""}
        try:
            lab = load_lab(topology.path)
        except LabctlError as exc:
            row["error"] = exc.message
        else:
            row["nodes"], row["rdma"] = len(lab.nodes), sorted({n.rdma for n in lab.nodes})
            row["provider"] = lab.provider
        rows.append(row)
    return rows


def topologies(
    as_json: bool = typer.Option(False, "--json", help="Print JSON: an object whose list "
                                 "`topologies` has one record per topology (docs/json.md)."),
) -> None:
    """List the shipped topologies: `labctl up NAME` and `labctl validate NAME` take them."""
    rows = topology_rows()
    if as_json:
        output: TopologiesOutput = {"topologies": rows}
        print_json(output)
        return
    table = Table(title="shipped topologies (labctl up NAME)")
    for column in ("name", "nodes", "rdma", "provider", "file"):
        table.add_column(column, overflow="fold")
    for row in rows:
        if row["error"]:
            table.add_row(row["name"], "-", "-", "-", f"{row['file']} ({row['error']})")
            continue
        table.add_row(row["name"], str(row["nodes"]), ", ".join(row["rdma"]), row["provider"],
                      row["file"])
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("topologies")(topologies)
