"""A lab as a graph, for `labctl graph`: vertices (nodes, routers, switches) and edges
(cables), with what a picture of the lab shows: RDMA devices, interfaces, addresses, MTU.

Pure functions of the resolved Lab and, for a lab that is up, what its state.json recorded;
the renderers (labctl/topology/graph_text.py, graph_draw.py) draw a Graph, never a Lab.
A p2p segment is one edge between its two nodes; a switch segment is a vertex of its own
with one edge to each of its nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from labctl.topology.resolved import Lab, Node, ProviderName, Rdma, Segment

VertexKind = Literal["node", "router", "switch"]

SWITCH_PREFIX = "switch:"  # a switch's vertex id; node names never hold a ':'


@dataclass(frozen=True)
class Recorded:
    """What a lab's state.json recorded of a node when it became ready (no live query)."""

    device: str = ""  # the first RDMA device's name, e.g. rxe0
    port_state: str = ""  # e.g. ACTIVE


@dataclass(frozen=True)
class Vertex:
    id: str  # the node's name, or "switch:" + the segment's name
    name: str
    kind: VertexKind
    rdma: Rdma | Literal[""]  # "" for a switch
    rdma_interfaces: tuple[str, ...]  # the interfaces with an RDMA device, in device order
    subnet: str  # a switch's subnet; "" for a node
    mtu: int  # a switch's MTU; 0 for a node
    routes: tuple[str, ...]  # "10.77.2.0/24 via 10.77.1.1"
    host: str  # multi-host docker labs: the host that runs the node; "" otherwise
    device: str  # recorded by a lab that is up; "" from a topology file
    port_state: str  # recorded by a lab that is up; "" from a topology file


@dataclass(frozen=True)
class End:
    vertex: str  # a vertex id
    interface: str  # "" on a switch's side
    ipv4: str  # "10.77.1.1/24"; "" on a switch's side


@dataclass(frozen=True)
class Edge:
    segment: str
    kind: Literal["p2p", "switch"]
    subnet: str
    mtu: int
    ends: tuple[End, End]


@dataclass(frozen=True)
class Graph:
    lab: str
    provider: ProviderName
    phase: str  # the lab's phase when drawn from a lab that is up; "" from a topology file
    vertices: tuple[Vertex, ...]
    edges: tuple[Edge, ...]

    def vertex(self, vertex_id: str) -> Vertex:
        return next(v for v in self.vertices if v.id == vertex_id)

    def to_dict(self) -> dict[str, Any]:
        """The `labctl graph --json` record (docs/json.md)."""
        return asdict(self)


def switch_id(segment: Segment) -> str:
    return SWITCH_PREFIX + segment.name


def _node_vertex(lab: Lab, node: Node, recorded: Recorded) -> Vertex:
    placement = lab.provider_options.get("placement")
    host = placement.get(node.name, "") if isinstance(placement, dict) else ""
    return Vertex(
        id=node.name, name=node.name, kind="router" if node.router else "node",
        rdma=node.rdma, rdma_interfaces=tuple(i.name for i in node.rdma_interfaces),
        subnet="", mtu=0, routes=tuple(f"{r.to} via {r.via}" for r in node.routes),
        host=str(host), device=recorded.device, port_state=recorded.port_state,
    )


def _switch_vertex(segment: Segment) -> Vertex:
    return Vertex(id=switch_id(segment), name=segment.name, kind="switch", rdma="",
                  rdma_interfaces=(), subnet=segment.subnet, mtu=segment.mtu, routes=(),
                  host="", device="", port_state="")


def _node_end(lab: Lab, endpoint: str) -> End:
    node_name, _, ifname = endpoint.partition(":")
    iface = next(i for i in lab.node(node_name).interfaces if i.name == ifname)
    return End(vertex=node_name, interface=ifname, ipv4=iface.ipv4)


def _segment_edges(lab: Lab, segment: Segment) -> list[Edge]:
    ends = [_node_end(lab, e) for e in segment.endpoints]
    if segment.kind == "p2p" and len(ends) == 2:
        return [Edge(segment.name, "p2p", segment.subnet, segment.mtu, (ends[0], ends[1]))]
    hub = End(vertex=switch_id(segment), interface="", ipv4="")
    return [Edge(segment.name, "switch", segment.subnet, segment.mtu, (end, hub)) for end in ends]


def build_graph(lab: Lab, recorded: Mapping[str, Recorded] | None = None,
                phase: str = "") -> Graph:
    """The graph of `lab`: its nodes in topology order, then one switch per switch segment;
    its edges in segment order. `recorded` and `phase`: from a lab that is up."""
    facts = recorded or {}
    vertices = [_node_vertex(lab, n, facts.get(n.name, Recorded())) for n in lab.nodes]
    vertices += [_switch_vertex(s) for s in lab.segments if s.kind == "switch"]
    edges = [edge for s in lab.segments for edge in _segment_edges(lab, s)]
    return Graph(lab=lab.name, provider=lab.provider, phase=phase,
                 vertices=tuple(vertices), edges=tuple(edges))


def rdma_text(vertex: Vertex) -> str:
    """A node's RDMA side in words: "rxe on eth1", "rxe0 (rxe on eth1) ACTIVE", "no RDMA"."""
    if vertex.rdma in ("", "none") or not vertex.rdma_interfaces:
        return "no RDMA"
    text = f"{vertex.rdma} on {', '.join(vertex.rdma_interfaces)}"
    if vertex.device:
        text = f"{vertex.device} ({text})"
    return f"{text} {vertex.port_state}" if vertex.port_state else text
