"""`labctl graph [TOPOLOGY]`: a picture of a lab, in the terminal or in a file.

A lab that is up is drawn from its lab.json and state.json only (never a node: graph is
instant); a topology file is resolved as `labctl validate` resolves it. The graph itself is
labctl/topology/graph.py; its text forms graph_text.py, its images graph_draw.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from labctl.cli import complete
from labctl.cli.common import console, lab_option
from labctl.cli.safeprint import print_json
from labctl.errors import UsageError, short_repr
from labctl.store.state import atomic_write

if TYPE_CHECKING:
    from labctl.topology.graph import Graph

TEXT_FORMATS = ("text", "dot", "mermaid")
IMAGE_FORMATS = ("svg", "png")
FORMATS = TEXT_FORMATS + IMAGE_FORMATS
# -o's suffix names the format when --format is absent.
SUFFIXES = {".txt": "text", ".dot": "dot", ".gv": "dot", ".mmd": "mermaid",
            ".mermaid": "mermaid", ".svg": "svg", ".png": "png"}
_SUFFIX_LIST = ", ".join(SUFFIXES)


def _check_format(value: str | None) -> str | None:
    if value is not None and value not in FORMATS:
        raise UsageError(f"unknown --format {short_repr(value)}",
                         hint=f"formats: {', '.join(FORMATS)}")
    return value


def output_format(fmt: str | None, output: Path | None) -> str:
    """The format asked for: --format, else -o's suffix, else text (exit 2 when unknown)."""
    if fmt is not None:
        return fmt
    if output is None:
        return "text"
    found = SUFFIXES.get(output.suffix.lower())
    if found is None:
        raise UsageError(f"cannot tell the format of {short_repr(str(output))} from its suffix",
                         hint=f"name it with one of {_SUFFIX_LIST}, or give --format "
                         f"({', '.join(FORMATS)})")
    return found


def check_output(output: Path) -> None:
    """-o must name a file in a directory that exists (nothing is made on the way)."""
    if not output.parent.is_dir():
        raise UsageError(f"{short_repr(str(output))}: its directory does not exist",
                         hint="create the directory first, or write somewhere else")
    if output.is_dir():
        raise UsageError(f"{short_repr(str(output))} is a directory",
                         hint="give a file name, e.g. -o lab.svg")


def require_matplotlib(fmt: str) -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(f"--format {fmt} needs matplotlib, which is not installed",
                         hint="pip install 'labctl[plot]' (pipx: pipx inject labctl matplotlib),"
                         " or use --format dot or mermaid") from None


def graph_of_topology(topology: str) -> Graph:
    from labctl.topology.catalog import find_topology
    from labctl.topology.graph import build_graph
    from labctl.topology.load import load_lab

    return build_graph(load_lab(find_topology(topology)))


def graph_of_lab(name: str | None) -> Graph:
    """A lab that is up, from its files: the recorded device and port state of each node."""
    from labctl.lab.labs import lab_graph

    return lab_graph(name)


def render(graph: Graph, fmt: str) -> bytes:
    if fmt in IMAGE_FORMATS:
        from labctl.topology.graph_draw import draw

        return draw(graph, fmt)
    from labctl.topology.graph_text import render_dot, render_mermaid, render_text

    renderer = {"text": render_text, "dot": render_dot, "mermaid": render_mermaid}[fmt]
    return renderer(graph).encode()


def _check_arguments(topology: str | None, lab: str | None, fmt: str | None,
                     output: Path | None, as_json: bool) -> str:
    """The format to write, after every refusal that needs no lab (exit 2)."""
    if topology is not None and lab is not None:
        raise UsageError("give a TOPOLOGY or --lab, not both",
                         hint="a topology file draws what `up` would make; --lab a lab that is up")
    if as_json and (fmt is not None or output is not None):
        raise UsageError("--json prints the graph as JSON on stdout: it takes no --format or -o",
                         hint="labctl graph --json > graph.json")
    chosen = output_format(fmt, output)
    if output is not None:
        check_output(output)
    elif chosen in IMAGE_FORMATS:
        raise UsageError(f"--format {chosen} writes a file: give -o FILE.{chosen}",
                         hint=f"labctl graph --format {chosen} -o lab.{chosen}")
    if chosen in IMAGE_FORMATS:
        require_matplotlib(chosen)
    return chosen


def register(app: typer.Typer) -> None:
    @app.command("graph")
    def graph(
        topology: str = typer.Argument(
            None, metavar="TOPOLOGY", show_default=False, autocompletion=complete.topologies,
            help="Topology file (YAML) or shipped topology to draw; without it, a lab that "
            "is up."),
        lab: str = lab_option("Lab to draw (default: the only lab that is up)."),
        fmt: str = typer.Option(None, "--format", metavar="|".join(FORMATS),
                                autocompletion=complete.choices(*FORMATS),
                                callback=_check_format, show_default=False,
                                help="Output format (default: from -o's suffix, else text)."),
        output: Path = typer.Option(None, "-o", "--output", metavar="FILE",
                                    dir_okay=True, show_default=False,
                                    help="Write to this file (.txt .dot .gv .mmd .svg .png)."),
        as_json: bool = typer.Option(False, "--json",
                                     help="Print the graph as JSON: vertices and edges."),
    ) -> None:
        """Draw a lab: its nodes, RDMA devices, links, switches and routers.

        Nodes with their RDMA device and kind, links with interfaces, addresses and MTU.

        In the terminal, or as dot, mermaid, SVG or PNG in a file (-o FILE)."""
        chosen = _check_arguments(topology, lab, fmt, output, as_json)
        drawn = graph_of_topology(topology) if topology is not None else graph_of_lab(lab)
        if as_json:
            print_json(drawn.to_dict())
            return
        data = render(drawn, chosen)
        if output is None:
            typer.echo(data.decode(), nl=False)
            return
        atomic_write(output, data)
        console.print(f"{chosen}: {output}", markup=False)
