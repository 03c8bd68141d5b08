"""A node or a link end named on the command line, looked up in a lab: one check and one
message for each, whichever command or option the name came from (bad input: exit 2)."""

from __future__ import annotations

from labctl.errors import UsageError, short_repr
from labctl.topology.resolved import Lab, Node


def require_node(lab: Lab, name: str, *, flag: str = "") -> Node:
    """The node `name` of `lab`, else a UsageError that lists the lab's nodes. `flag` (e.g.
    "--server") starts the message when the name came from that option."""
    names = [n.name for n in lab.nodes]
    if name not in names:
        raise UsageError(f"{flag + ': ' if flag else ''}lab {lab.name} has no node "
                         f"{short_repr(name)}", hint=f"nodes: {', '.join(names)}")
    return lab.node(name)


def require_endpoint(lab: Lab, endpoint: str) -> tuple[str, str]:
    """NODE:IF -> (node, ifname), checked against the lab's topology: the one reading of a
    link end for `link`, `capture`, `fault` and the pytest plugin."""
    node, sep, ifname = endpoint.partition(":")
    if not sep or not node or not ifname:
        raise UsageError(f"bad endpoint {short_repr(endpoint)}",
                         hint="write NODE:IF, e.g. node1:eth1")
    names = sorted(i.name for i in require_node(lab, node).interfaces)
    if ifname not in names:
        raise UsageError(f"node {node} has no data interface {short_repr(ifname)}",
                         hint=f"its data interfaces: {', '.join(names) or 'none'}")
    return node, ifname
