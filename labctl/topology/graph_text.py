"""`labctl graph`'s text forms of a Graph: the terminal's, Graphviz dot and Mermaid.

Pure functions, each output the same for the same graph (tests/unit/golden/graph/).
Names come from lab.json, which a user may edit: every name is quoted or escaped for the
format it lands in.
"""

from __future__ import annotations

from labctl.topology.graph import End, Graph, Vertex, rdma_text

ARROW = "<-->"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' * (count != 1)}"


def _headline(graph: Graph) -> str:
    kinds = [v.kind for v in graph.vertices]
    parts = [_plural(kinds.count("node"), "node")]
    if kinds.count("router"):
        parts.append(_plural(kinds.count("router"), "router"))
    if kinds.count("switch"):
        parts.append(_plural(kinds.count("switch"), "switch").replace("switchs", "switches"))
    where = f"{graph.provider}, phase {graph.phase}" if graph.phase else graph.provider
    return f"lab {graph.lab} ({where}): {', '.join(parts)}"


def _end_text(graph: Graph, end: End) -> str:
    return f"{graph.vertex(end.vertex).name} {end.interface} {end.ipv4}"


def _node_lines(graph: Graph) -> list[str]:
    nodes = [v for v in graph.vertices if v.kind != "switch"]
    width = max(len(v.name) for v in nodes)
    lines = ["nodes:"]
    for vertex in nodes:
        extra = f"  on host {vertex.host}" if vertex.host else ""
        lines.append(f"  {vertex.name:<{width}}  {vertex.kind:<6}  {rdma_text(vertex)}{extra}")
    return lines


def _link_lines(graph: Graph) -> list[str]:
    lines: list[str] = []
    for edge in (e for e in graph.edges if e.kind == "p2p"):
        lines.append(f"  {edge.segment}  {edge.subnet}  mtu {edge.mtu}")
        lines.append(f"    {_end_text(graph, edge.ends[0])} {ARROW} "
                     f"{_end_text(graph, edge.ends[1])}")
    return ["links:", *lines] if lines else []


def _switch_lines(graph: Graph) -> list[str]:
    lines: list[str] = []
    for switch in (v for v in graph.vertices if v.kind == "switch"):
        lines.append(f"  {switch.name}  switch  {switch.subnet}  mtu {switch.mtu}")
        ends = [e.ends[0] for e in graph.edges if e.ends[1].vertex == switch.id]
        for number, end in enumerate(ends, start=1):
            branch = "`--" if number == len(ends) else "|--"
            lines.append(f"    {branch} {_end_text(graph, end)}")
    return ["switches:", *lines] if lines else []


def _route_lines(graph: Graph) -> list[str]:
    routed = [v for v in graph.vertices if v.routes]
    if not routed:
        return []
    width = max(len(v.name) for v in routed)
    return ["routes:", *(f"  {v.name:<{width}}  {', '.join(v.routes)}" for v in routed)]


def _printable(text: str) -> str:
    """Control characters as escapes: an edited lab.json must not drive the terminal."""
    return "".join(c if c == "\n" or c.isprintable() else repr(c)[1:-1] for c in text)


def render_text(graph: Graph) -> str:
    """The terminal's picture: nodes, p2p links, switches with their ports, routes."""
    sections = [_node_lines(graph), _link_lines(graph), _switch_lines(graph),
                _route_lines(graph)]
    text = "\n".join([_headline(graph), *(line for s in sections for line in s)]) + "\n"
    return _printable(text)


# --- Graphviz dot ------------------------------------------------------------------------
def _dot_quote(text: str) -> str:
    r"""A dot string: "..." with " and \ escaped; a newline is dot's centred line break."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _vertex_label(vertex: Vertex) -> list[str]:
    if vertex.kind == "switch":
        return [vertex.name, f"switch {vertex.subnet}", f"mtu {vertex.mtu}"]
    lines = [vertex.name, rdma_text(vertex)]
    if vertex.kind == "router":
        lines[1] = f"router, {lines[1]}"
    if vertex.host:
        lines.append(f"host {vertex.host}")
    return lines


_DOT_SHAPES = {"node": "box", "router": "octagon", "switch": "diamond"}


def render_dot(graph: Graph) -> str:
    """Graphviz text (`dot -Tsvg`): an undirected graph, one edge per cable."""
    lines = [f"graph {_dot_quote(graph.lab)} {{",
             f"  label={_dot_quote(_headline(graph))};",
             "  labelloc=t;",
             '  node [fontname="Helvetica"];',
             '  edge [fontname="Helvetica", fontsize=10];']
    for vertex in graph.vertices:
        style = ', style="rounded"' if vertex.kind == "node" else ""
        lines.append(f"  {_dot_quote(vertex.id)} [shape={_DOT_SHAPES[vertex.kind]}{style}, "
                     f"label={_dot_quote(chr(10).join(_vertex_label(vertex)))}];")
    for edge in graph.edges:
        tail, head = edge.ends
        label = f"{edge.segment}\n{edge.subnet}\nmtu {edge.mtu}"
        ends = f"taillabel={_dot_quote(f'{tail.interface} {tail.ipv4}')}"
        if head.interface:
            ends += f", headlabel={_dot_quote(f'{head.interface} {head.ipv4}')}"
        elif edge.kind == "switch":
            label = f"{tail.interface} {tail.ipv4}"  # the switch's label has the rest
            ends = ""
        attributes = f"label={_dot_quote(label)}" + (f", {ends}" if ends else "")
        lines.append(f"  {_dot_quote(tail.vertex)} -- {_dot_quote(head.vertex)} [{attributes}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --- Mermaid -----------------------------------------------------------------------------
def _mermaid_text(text: str) -> str:
    """Mermaid label text inside "...": quotes and markup characters as entity codes."""
    for char, code in (("&", "#amp;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;"),
                       ("|", "#124;"), ("\n", " ")):
        text = text.replace(char, code)
    return text


def _mermaid_ids(graph: Graph) -> dict[str, str]:
    # Mermaid ids are plain words: a vertex's id (a name, "switch:lan") is not one.
    return {v.id: f"{v.kind[0]}{n}" for n, v in enumerate(graph.vertices, start=1)}


_MERMAID_SHAPES = {"node": ('("', '")'), "router": ('{{"', '"}}'), "switch": ('(["', '"])')}


def render_mermaid(graph: Graph) -> str:
    """A Mermaid flowchart (GitHub renders it in a ```mermaid block)."""
    ids = _mermaid_ids(graph)
    lines = ["flowchart LR", f"  %% {_mermaid_text(_headline(graph))}"]
    for vertex in graph.vertices:
        opening, closing = _MERMAID_SHAPES[vertex.kind]
        label = "<br/>".join(_mermaid_text(line) for line in _vertex_label(vertex))
        lines.append(f"  {ids[vertex.id]}{opening}{label}{closing}")
    for edge in graph.edges:
        tail, head = edge.ends
        if head.interface:
            words = (f"{tail.interface} {tail.ipv4} - {edge.segment} mtu {edge.mtu} - "
                     f"{head.interface} {head.ipv4}")
        else:
            words = f"{tail.interface} {tail.ipv4}"
        lines.append(f'  {ids[tail.vertex]} ---|"{_mermaid_text(words)}"| {ids[head.vertex]}')
    return "\n".join(lines) + "\n"
