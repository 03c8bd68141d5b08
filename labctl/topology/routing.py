"""IPv4 routing between a lab's segments: the routes computed through router nodes, and
the path a packet takes through a resolved lab (which routers it passes, if it arrives).

Computed routes: for each node, a route to every segment it is not on, through the
nearest router (fewest routers on the way; ties go to the lower segment index, then the
router that comes first in the topology). Explicit routes replace the computed ones to
the segments they cover (`resolve` does that merge)."""

from __future__ import annotations

import ipaddress
from collections import deque
from collections.abc import Mapping, Sequence

from labctl.topology.resolved import Interface, Lab, Node

Net = ipaddress.IPv4Network
Addr = ipaddress.IPv4Address
# node -> its interfaces as (segment index, address), in topology order
Attachments = Mapping[str, Sequence[tuple[int, Addr]]]

MAX_HOPS = 64  # Linux's default IP TTL: a path longer than that would never arrive


def computed_routes(attachments: Attachments, routers: Sequence[str],
                    subnets: Sequence[Net]) -> dict[str, list[tuple[Net, Addr]]]:
    """node -> [(segment subnet, gateway)] for every segment reachable through routers."""
    on_segment: dict[int, list[tuple[str, Addr]]] = {}
    for router in routers:  # in topology order: the tie-break
        for segment, address in attachments[router]:
            on_segment.setdefault(segment, []).append((router, address))
    routes: dict[str, list[tuple[Net, Addr]]] = {}
    for node, ifaces in attachments.items():
        own = sorted({segment for segment, _ in ifaces})
        first_hop: dict[int, Addr] = {}
        seen = set(own)
        queue = deque(own)
        while queue:
            segment = queue.popleft()
            for router, address in on_segment.get(segment, ()):
                if router == node:
                    continue
                hop = first_hop.get(segment, address)
                for beyond in sorted(s for s, _ in attachments[router]):
                    if beyond not in seen:
                        seen.add(beyond)
                        first_hop[beyond] = hop
                        queue.append(beyond)
        routes[node] = [(subnets[s], first_hop[s]) for s in sorted(first_hop)]
    return routes


def next_hop(node: Node, lab: Lab, dst: Addr) -> Addr | None:
    """Where `node` sends a packet for `dst`: dst itself when it is on one of the node's
    segments (connected routes win: they are the most specific here), else the gateway of
    the longest matching route, else None (no route)."""
    for iface in node.interfaces:
        if dst in Net(lab.segments[iface.segment].subnet):
            return dst
    best: tuple[int, Addr] | None = None
    for route in node.routes:
        net = Net(route.to)
        if dst in net and (best is None or net.prefixlen > best[0]):
            best = (net.prefixlen, Addr(route.via))
    return best[1] if best else None


def egress(lab: Lab, node: Node, dst: str) -> Interface | None:
    """The interface `node`'s packets for address `dst` leave by (None: no route)."""
    hop = next_hop(node, lab, Addr(dst))
    if hop is None:
        return None
    return next((i for i in node.interfaces
                 if hop in Net(lab.segments[i.segment].subnet)), None)


def owner(lab: Lab, address: Addr) -> Node | None:
    """The node that has `address` on one of its interfaces."""
    for node in lab.nodes:
        if any(Addr(i.address) == address for i in node.interfaces):
            return node
    return None


def route_path(lab: Lab, src: str, dst: str) -> list[str] | None:
    """The routers a packet from node `src` to address `dst` passes, in order ([] on one
    segment), or None when it cannot arrive (no route, a gateway that does not forward, a
    loop)."""
    target = Addr(dst)
    node = lab.node(src)
    passed: list[str] = []
    while True:
        hop = next_hop(node, lab, target)
        if hop is None:
            return None
        nxt = owner(lab, hop)
        if hop == target:
            return passed if nxt is not None else None
        if nxt is None or not nxt.router or nxt.name in passed or len(passed) >= MAX_HOPS:
            return None
        passed.append(nxt.name)
        node = nxt
