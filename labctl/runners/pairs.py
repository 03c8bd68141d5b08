"""Which (server, client) node pairs a run goes between: the user's selection (--server,
--client, --pairs) made into pairs for the CLI's `run`, `bench` and the pytest plugin alike,
and whether a pair has an IP path (one segment, or routes through routers both ways)."""

from __future__ import annotations

import itertools

from labctl.errors import UsageError, short_repr
from labctl.runners.schedule import MAX_JOBS, Pair
from labctl.topology.lookup import require_node
from labctl.topology.resolved import Interface, Lab
from labctl.topology.routing import egress, route_path

PAIR_MODES = ("first", "adjacent", "all")
PAIRS_HINT = "use first, adjacent, all or NODE:NODE[,NODE:NODE...], e.g. node1:node2"


def rdma_nodes(lab: Lab) -> list[str]:
    return [n.name for n in lab.nodes if n.rdma != "none"]


def shared_segment(lab: Lab, a: str, b: str) -> bool:
    """True when the two nodes have RDMA devices on one segment."""
    return any(ia.segment == ib.segment for ia in lab.node(a).rdma_interfaces
               for ib in lab.node(b).rdma_interfaces)


def pair_interfaces(lab: Lab, server: str, client: str) -> tuple[Interface, Interface] | None:
    """The interfaces (hence the RDMA devices) a run between the two nodes uses: on a
    segment both have a device on, the first such; else, through routers, a server device
    the client's packets reach by its device on the segment they leave by, and back the
    same way. None: no IP path between any of their devices."""
    sis, cis = lab.node(server).rdma_interfaces, lab.node(client).rdma_interfaces
    for si in sis:
        for ci in cis:
            if si.segment == ci.segment:
                return si, ci
    for si in sis:
        out = egress(lab, lab.node(client), si.address)
        mine = next((c for c in cis if out is not None and c.name == out.name), None)
        if mine is None:
            continue
        back = egress(lab, lab.node(server), mine.address)
        if (back is not None and back.name == si.name
                and route_path(lab, client, si.address) is not None
                and route_path(lab, server, mine.address) is not None):
            return si, mine
    return None


def ip_path(lab: Lab, server: str, client: str) -> list[str] | None:
    """The routers between the client and the server's RDMA address ([] on one segment),
    or None when packets cannot make the round trip. The examples address the server by
    the IP of the interface its device is on and the server answers the client's."""
    found = pair_interfaces(lab, server, client)
    return None if found is None else route_path(lab, client, found[0].address)


def no_path_reason(lab: Lab, server: str, client: str) -> str:
    si, ci = lab.node(server).rdma_interface, lab.node(client).rdma_interface
    where = (f"{server} ({si.address}) and {client} ({ci.address})" if si and ci
             else f"{server} and {client}")
    return (f"no IP path: {where} have their RDMA devices on different segments and no "
            "routes join them")


def resolve_pairs(lab: Lab, spec: str) -> list[tuple[str, str]]:
    """The pairs for `--pairs SPEC` other than `first` (the caller picks that one).

    adjacent: every unordered pair of RDMA nodes whose RDMA interfaces share a segment,
    the earlier node of the topology as server; all: every unordered pair of RDMA nodes
    (a pair with no IP path comes back skipped from the run); A:B,C:D: exactly those."""
    nodes = rdma_nodes(lab)
    if spec == "adjacent":
        return [(a, b) for a, b in itertools.combinations(nodes, 2)
                if shared_segment(lab, a, b)]
    if spec == "all":
        return list(itertools.combinations(nodes, 2))
    pairs: list[tuple[str, str]] = []
    for item in spec.split(","):
        server, colon, client = item.strip().partition(":")
        if not colon or not server or not client:
            raise UsageError(f"--pairs: {short_repr(item)} is not NODE:NODE", hint=PAIRS_HINT)
        for node in (server, client):
            require_node(lab, node, flag="--pairs")
            if node not in nodes:
                raise UsageError(f"--pairs: node {node} has no RDMA device (rdma: none)",
                                 hint="nodes with RDMA devices: " + (", ".join(nodes) or
                                                                      "none"))
        if server == client:
            raise UsageError(f"--pairs: {item.strip()} pairs a node with itself",
                             hint=PAIRS_HINT)
        if (server, client) in pairs:
            raise UsageError(f"--pairs: {item.strip()} is given twice", hint=PAIRS_HINT)
        pairs.append((server, client))
    return pairs


def check_selection(pairs: str = "first", server: str | None = None,
                    client: str | None = None, jobs: int = 1) -> None:
    """--pairs and --jobs against --server/--client: what can be refused before the lab is
    opened (exit 2 without waiting for it)."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= MAX_JOBS:
        raise UsageError(f"--jobs must be a whole number from 1 to {MAX_JOBS} (got "
                         f"{short_repr(jobs)})", hint="e.g. --jobs 2")
    if pairs != "first" and (server or client):
        raise UsageError("--server/--client choose the first pair only",
                         hint="name the pairs in --pairs instead, e.g. --pairs node1:node2")


def select_pairs(lab: Lab, pairs: str = "first", server: str | None = None,
                 client: str | None = None, *,
                 names: tuple[str, str] = ("--server", "--client")) -> list[Pair]:
    """The pairs a run goes between, in order: with `pairs` "first", the one pair of
    `server` and `client` as given (checked) or else the first two nodes with RDMA devices;
    otherwise those of --pairs (resolve_pairs). A UsageError says what is wrong, naming the
    server and client by `names` (the CLI's flags; the pytest plugin's keywords)."""
    if pairs != "first":
        check_selection(pairs, server, client)
        chosen = resolve_pairs(lab, pairs)
        if not chosen:
            raise UsageError(f"--pairs {pairs}: lab {lab.name} has no such pair",
                             hint="adjacent needs two RDMA nodes on one segment; all, two "
                             "nodes with RDMA devices")
        return chosen
    nodes = rdma_nodes(lab)
    for flag, value in zip(names, (server, client), strict=True):
        if value is None:
            continue
        require_node(lab, value, flag=flag)
        if value not in nodes:
            raise UsageError(f"{flag}: node {value} has no RDMA device (rdma: none)",
                             hint="nodes with RDMA devices: " + (", ".join(nodes) or "none"))
    server = server or (nodes[0] if nodes else None)
    client = client or next((n for n in nodes if n != server), None)
    if not server or not client:
        raise UsageError("this example needs two nodes with RDMA devices",
                         hint="add nodes with rdma: rxe, or pick them with "
                         f"{names[0]}/{names[1]}")
    if server == client:
        raise UsageError(f"{names[0]} and {names[1]} must be different nodes",
                         hint="`labctl status` lists the lab's nodes")
    return [(server, client)]
