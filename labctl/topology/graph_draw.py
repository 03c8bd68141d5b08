"""`labctl graph --format svg|png`: a Graph drawn with matplotlib (the `plot` extra).

The layout is simple and deterministic (no graph library): a chain of nodes (two-node,
routed) in one row in chain order; anything else on a circle, switches in its middle.
matplotlib is imported inside draw(): the CLI checks first that it is installed.
"""

from __future__ import annotations

import io
import math

from labctl.topology.graph import Edge, Graph, Vertex, rdma_text

Point = tuple[float, float]

_COLOURS = {"node": "#dbe9f6", "router": "#fde2c8", "switch": "#e3e3e3"}


def _chain(graph: Graph) -> list[str] | None:
    """The vertex ids in path order when the graph is a single path, else None."""
    ids = [v.id for v in graph.vertices]
    neighbours: dict[str, list[str]] = {i: [] for i in ids}
    for edge in graph.edges:
        a, b = edge.ends[0].vertex, edge.ends[1].vertex
        neighbours[a].append(b)
        neighbours[b].append(a)
    if len(graph.edges) != len(ids) - 1 or any(len(n) > 2 for n in neighbours.values()):
        return None
    ends = [i for i in ids if len(neighbours[i]) <= 1]
    order = [ends[0]] if ends else []
    while order and len(order) < len(ids):
        following = [n for n in neighbours[order[-1]] if n not in order]
        if not following:
            return None  # not connected
        order.append(following[0])
    return order if len(order) == len(ids) else None


def layout(graph: Graph) -> dict[str, Point]:
    """Each vertex's centre, in a box of about -1..1 on both axes."""
    chain = _chain(graph)
    if chain is not None:
        step = 2.0 / max(len(chain) - 1, 1)
        return {vid: (-1.0 + k * step if len(chain) > 1 else 0.0, 0.0)
                for k, vid in enumerate(chain)}
    outer = [v.id for v in graph.vertices if v.kind != "switch"]
    inner = [v.id for v in graph.vertices if v.kind == "switch"]
    points: dict[str, Point] = {}
    for ring, radius in ((outer, 1.0), (inner, 0.0 if len(inner) == 1 else 0.4)):
        for k, vid in enumerate(ring):
            angle = math.pi - 2 * math.pi * k / len(ring)  # the first on the left, clockwise
            points[vid] = (round(radius * math.cos(angle), 6), round(radius * math.sin(angle), 6))
    return points


def _box_text(vertex: Vertex) -> str:
    if vertex.kind == "switch":
        return f"{vertex.name}\nswitch {vertex.subnet}\nmtu {vertex.mtu}"
    lines = [vertex.name, rdma_text(vertex)]
    if vertex.kind == "router":
        lines[1] = f"router, {lines[1]}"
    if vertex.host:
        lines.append(f"host {vertex.host}")
    return "\n".join(lines)


def _along(a: Point, b: Point, share: float, side: float = 0.0) -> Point:
    """The point `share` of the way from a to b, moved `side` across the line (left > 0)."""
    dx, dy = b[0] - a[0], b[1] - a[1]
    length = math.hypot(dx, dy) or 1.0
    return (a[0] + dx * share - dy / length * side, a[1] + dy * share + dx / length * side)


def _edge_labels(edge: Edge, points: dict[str, Point]) -> list[tuple[Point, str]]:
    """Texts on a cable: each node's interface near its end, the segment in the middle."""
    a, b = points[edge.ends[0].vertex], points[edge.ends[1].vertex]
    # Interfaces on one side of the line, the segment on the other: they never overlap.
    labels = [(_along(a, b, 0.3 if end is edge.ends[0] else 0.7, -0.1),
               f"{end.interface}\n{end.ipv4}") for end in edge.ends if end.interface]
    if edge.kind == "p2p":
        labels.append((_along(a, b, 0.5, 0.12),
                       f"{edge.segment}\n{edge.subnet}\nmtu {edge.mtu}"))
    return labels


def draw(graph: Graph, image_format: str) -> bytes:
    """The graph as an SVG or PNG file's bytes (the same bytes for the same graph)."""
    import matplotlib
    from matplotlib.figure import Figure

    points = layout(graph)
    flat = all(y == 0.0 for _, y in points.values())  # a chain: one row, a low figure
    # SVG text stays text (searchable, selectable); a fixed salt makes ids the same each run.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "labctl-graph"}):
        figure = Figure(figsize=(10, 3.5 if flat else 6.5))
        axes = figure.add_axes((0.0, 0.0, 1.0, 0.88))
        axes.set_xlim(-1.3, 1.3)
        axes.set_ylim(*((-0.4, 0.4) if flat else (-1.3, 1.3)))
        axes.axis("off")
        figure.suptitle(_title(graph), fontsize=12)
        for edge in graph.edges:
            (ax, ay), (bx, by) = points[edge.ends[0].vertex], points[edge.ends[1].vertex]
            axes.plot([ax, bx], [ay, by], color="#555555", linewidth=1.5, zorder=1)
            for (x, y), text in _edge_labels(edge, points):
                axes.text(x, y, text, fontsize=7.5, ha="center", va="center", zorder=2,
                          bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none"})
        for vertex in graph.vertices:
            x, y = points[vertex.id]
            shape = "round,pad=0.5" if vertex.kind != "switch" else "square,pad=0.5"
            axes.text(x, y, _box_text(vertex), fontsize=9, ha="center", va="center", zorder=3,
                      bbox={"boxstyle": shape, "fc": _COLOURS[vertex.kind], "ec": "#333333"})
        buffer = io.BytesIO()
        metadata = {"Date": None} if image_format == "svg" else {"Software": None}
        figure.savefig(buffer, format=image_format, dpi=100, metadata=metadata)
    return buffer.getvalue()


def _title(graph: Graph) -> str:
    where = f"{graph.provider}, phase {graph.phase}" if graph.phase else graph.provider
    return f"lab {graph.lab} ({where})"
