"""Cross checks of a validated topology (values related to each other) and its resolution
to a Lab: defaults applied, subnets, addresses and MACs assigned. Each check is a small
function adding the problems it finds; all of them are raised together. A check that needs
what an earlier one found wrong (addresses when an endpoint names no node) is skipped."""

from __future__ import annotations

import bisect
import hashlib
import ipaddress
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from labctl.capabilities import for_provider, offering
from labctl.data.recipes import RECIPES
from labctl.topology.errors import DEFAULT_HINT
from labctl.topology.host import QEMU_PC_SLOTS, HostFacts
from labctl.topology.kernelsource import IMAGE_KERNEL, resolve_kernel
from labctl.topology.locate import LineIndex, Loc
from labctl.topology.model import (
    MANAGEMENT_NETWORK,
    MAX_LINKS,
    MAX_NODES,
    MAX_PREFIX,
    NodeSpec,
    Topology,
)
from labctl.topology.problems import Problem, did_you_mean, report, show
from labctl.topology.resolved import Interface, Lab, Mount, Node, Route, Segment
from labctl.topology.routing import computed_routes
from labctl.topology.workbench import WorkbenchValueError, parse_mount, resolve_source


def _mac(lab_name: str, node_index: int, ifnum: int) -> str:
    h = hashlib.sha256(lab_name.encode()).digest()
    return f"02:{h[0]:02x}:{h[1]:02x}:{h[2]:02x}:{node_index:02x}:{ifnum:02x}"


def _ifnum(ifname: str) -> int:
    return int(ifname[3:])


def free_subnets(
    pool: ipaddress.IPv4Network, prefix: int, taken: Sequence[ipaddress.IPv4Network]
) -> Iterator[ipaddress.IPv4Network]:
    """Subnets of `pool` in order, from its second one, skipping any overlapping `taken`.

    `taken` as sorted, merged address ranges walked once alongside the candidates:
    linear, where checking every candidate against every taken subnet was quadratic."""
    ranges: list[list[int]] = []
    for start, end in sorted((int(t.network_address), int(t.broadcast_address)) for t in taken):
        if ranges and start <= ranges[-1][1] + 1:
            ranges[-1][1] = max(ranges[-1][1], end)
        else:
            ranges.append([start, end])
    size = 2 ** (32 - prefix)
    base = int(pool.network_address)
    count = 2 ** (prefix - pool.prefixlen)
    k, r = 1, 0
    while k < count:
        first = base + k * size
        while r < len(ranges) and ranges[r][1] < first:
            r += 1
        if r < len(ranges) and ranges[r][0] <= first + size - 1:  # clash: jump past it
            k = max(k + 1, -(-(ranges[r][1] + 1 - base) // size))
            continue
        yield ipaddress.IPv4Network((first, prefix))
        k += 1


class Subnets:
    """Subnets seen so far (CIDR blocks: two overlap only when one contains the other),
    answering "which earlier one overlaps this?" without comparing against all of them."""

    def __init__(self) -> None:
        self._first: dict[tuple[int, int], int] = {}  # (address, prefix) -> first index
        self._starts: list[tuple[int, int]] = []  # sorted (address, index)

    def add(self, net: ipaddress.IPv4Network, index: int) -> None:
        self._first.setdefault((int(net.network_address), net.prefixlen), index)
        bisect.insort(self._starts, (int(net.network_address), index))

    def first_overlap(self, net: ipaddress.IPv4Network) -> int | None:
        """The lowest index of a subnet seen that overlaps `net`, or None."""
        found: list[int] = []
        for length in range(net.prefixlen + 1):  # `net` itself or a block containing it
            outer = net.supernet(new_prefix=length)
            hit = self._first.get((int(outer.network_address), length))
            if hit is not None:
                found.append(hit)
        low = bisect.bisect_left(self._starts, (int(net.network_address), -1))
        high = bisect.bisect_right(self._starts, (int(net.broadcast_address), 1 << 62))
        if low < high:  # blocks that start inside `net` lie inside it
            found.append(min(index for _, index in self._starts[low:high]))
        return min(found) if found else None


@dataclass
class Checked:
    """A topology that passed the cross checks, with what they worked out: the input of
    `build_lab`. Filled by the `_check_*` steps in order; each adds problems it finds."""

    topo: Topology
    file: str
    lines: LineIndex
    specs: dict[str, NodeSpec]
    problems: list[Problem] = field(default_factory=list)
    seg_names: list[str] = field(default_factory=list)
    # node -> its data interfaces as (ifname, link index, endpoint index)
    node_ifaces: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)
    bad_endpoint: bool = False
    # subnets overlap or a segment has more endpoints than addresses: routes are not checked
    addresses_unsure: bool = False
    subnets: list[ipaddress.IPv4Network | None] = field(default_factory=list)
    mounts: dict[str, list[Mount]] = field(default_factory=dict)  # node -> its host folders
    kernels: dict[str, str] = field(default_factory=dict)  # node -> "image" or a host path
    # host folders the command line allowed (--allow-host-mount), resolved
    allowances: tuple[Path, ...] = ()
    host: HostFacts | None = None  # the host's figures; None: not compared (library use)
    # node -> its routes (explicit, then computed to the segments those do not cover)
    routes: dict[str, list[tuple[ipaddress.IPv4Network, ipaddress.IPv4Address]]] = field(
        default_factory=dict)

    def problem(self, loc: Loc, message: str, hint: str = DEFAULT_HINT) -> None:
        self.problems.append(Problem(loc, message, hint))


def cross_check(topo: Topology, source: str | None = None, *,
                allowances: tuple[Path, ...] = (), host: HostFacts | None = None) -> Checked:
    """Checks that relate values to each other; raise every problem found. `allowances`:
    host folders the command line allows mounts of; `host`: the figures to compare the
    nodes' memory and CPUs with (`labctl validate` and `up` give this host's)."""
    file = topo._source or source or "<topology>"
    checked = Checked(
        topo=topo,
        file=file,
        lines=LineIndex(topo._yaml_root),
        specs={name: spec or NodeSpec() for name, spec in topo.nodes.items()},
        allowances=allowances,
        host=host,
    )
    for step in (
        _check_node_count,
        _check_images,
        _check_mounts,
        _check_kernels,
        _check_segment_names,
        _check_endpoints,
        _check_rdma_has_link,
        _check_rdma_interfaces,
        _check_explicit_subnets,
        _assign_pool_subnets,
        _check_segment_sizes,
        _check_routes,
        _check_hosts,
        _check_link_count,
        _check_qemu_slots,
        _check_host_resources,
    ):
        step(checked)
    if checked.problems:
        raise report(checked.problems, file, checked.lines)
    return checked


def _check_node_count(c: Checked) -> None:
    if len(c.specs) > MAX_NODES:
        c.problem(
            ("nodes",),
            f"too many nodes: {len(c.specs)} (at most {MAX_NODES})",
            "split the lab in two",
        )


def _check_link_count(c: Checked) -> None:
    if len(c.topo.links) > MAX_LINKS:
        c.problem(("links",), f"too many links: {len(c.topo.links)} (at most {MAX_LINKS})",
                  "split the lab in two, or join nodes with one switch segment (a link with "
                  "more than two endpoints)")


def _check_qemu_slots(c: Checked) -> None:
    """A qemu node's lab NICs and mounts each take a PCI slot of the `pc` machine: more
    than it has and qemu refuses to start, after `up` has made the lab."""
    if not for_provider(c.topo.provider).pci_slots:
        return
    for name in c.specs:
        nics, mounts = len(c.node_ifaces.get(name, [])), len(c.mounts.get(name, []))
        if nics + mounts > QEMU_PC_SLOTS:
            c.problem(("nodes", name),
                      f"node {name} has {nics} links and {mounts} mounts: a qemu node has "
                      f"PCI slots for {QEMU_PC_SLOTS} of them together",
                      "join its neighbours through one switch segment (a link with more "
                      "than two endpoints), or mount fewer folders")


def _check_host_resources(c: Checked) -> None:
    """A VM's memory is its own and its vCPUs are threads of one process: a node bigger
    than the host, or nodes that together need more memory than it has, cannot run. Not
    for docker: a container's memory is a ceiling, and its engine may be another host;
    vCPUs beyond the host's in total are the usual case (time-shared), so only a node's
    own count is compared."""
    if c.host is None or not for_provider(c.topo.provider).own_memory:
        return
    d = c.topo.defaults
    total = 0
    # A default too large for the host is one problem (said for the first node that
    # takes it), not one per node; the total only counts when no node alone is too big.
    said: set[Loc] = set()
    for name, spec in c.specs.items():
        memory, cpus = spec.memory or d.memory, spec.cpus or d.cpus
        total += memory
        where = "nodes", name
        loc: Loc = (*where, "memory") if spec.memory else ("defaults", "memory")
        if memory > c.host.memory_mib and loc not in said:
            said.add(loc)
            c.problem(loc, f"node {name} asks for {memory} MiB of memory; this host has "
                      f"{c.host.memory_mib} MiB", "give the node less memory")
        loc = (*where, "cpus") if spec.cpus else ("defaults", "cpus")
        if cpus > c.host.cpus and loc not in said:
            said.add(loc)
            c.problem(loc, f"node {name} asks for {cpus} CPUs; this host has {c.host.cpus}",
                      f"give the node at most {c.host.cpus}")
    if total > c.host.memory_mib and not any(place[-1] == "memory" for place in said):
        c.problem(("nodes",), f"the nodes ask for {total} MiB of memory together; this host "
                  f"has {c.host.memory_mib} MiB", "give the nodes less memory, or use fewer "
                  "nodes")


def _check_images(c: Checked) -> None:
    """qemu and docker nodes boot labctl's images: their name must be a known recipe
    (`up` would otherwise fail after making the lab directory). Vagrant maps image names
    to boxes (labctl.providers.vagrant_plan, or LABCTL_VAGRANT_BOX), so it is not checked
    here."""
    if not for_provider(c.topo.provider).labctl_images:
        return
    known = sorted(RECIPES)
    hint = f"known images: {', '.join(known)} (see `labctl image list`)"
    if c.topo.defaults.image not in RECIPES:
        image = c.topo.defaults.image
        c.problem(("defaults", "image"),
                  f"unknown image {show(image)}" + did_you_mean(image, known), hint)
    for name, spec in c.specs.items():
        if spec.image is not None and spec.image not in RECIPES:
            c.problem(("nodes", name, "image"),
                      f"unknown image {show(spec.image)}" + did_you_mean(spec.image, known),
                      hint)


def _check_mounts(c: Checked) -> None:
    """Each node's mounts (the defaults' then its own): sources are existing host folders
    (relative ones from the topology file's directory), targets used once per node."""
    base = Path(c.file).parent if c.topo._source else Path.cwd()
    resolved: dict[Loc, Mount | None] = {}

    def one(loc: Loc, text: str) -> Mount | None:
        if loc not in resolved:
            try:
                spec = parse_mount(text)  # the model checked the syntax: cannot fail here
                resolved[loc] = Mount(resolve_source(spec.source, base, c.allowances),
                                      spec.target, spec.readonly)
            except WorkbenchValueError as exc:
                c.problem(loc, exc.message, exc.hint)
                resolved[loc] = None
        return resolved[loc]

    defaults = [(("defaults", "mounts", i), t) for i, t in enumerate(c.topo.defaults.mounts)]
    clashed: set[Loc] = set()
    for name, spec in c.specs.items():
        own = [(("nodes", name, "mounts", j), t) for j, t in enumerate(spec.mounts or [])]
        mounts: dict[str, Mount] = {}
        for loc, text in defaults + own:
            mount = one(loc, text)
            if mount is None:
                continue
            if mount.target in mounts:
                if loc not in clashed:  # a clash among the defaults' mounts: said once
                    clashed.add(loc)
                    c.problem(loc, f"node {name} already mounts a folder at {mount.target}",
                              "each node path takes one mount: change DST")
                continue
            mounts[mount.target] = mount
        c.mounts[name] = list(mounts.values())


def _check_kernels(c: Checked) -> None:
    """Each node's kernel (its own, else the defaults'): `image`, or an existing folder
    (relative ones from the topology file's directory), on a provider whose nodes boot a
    kernel of their own."""
    base = Path(c.file).parent if c.topo._source else Path.cwd()
    resolved: dict[Loc, str | None] = {}
    for name, spec in c.specs.items():
        loc: Loc = ("nodes", name, "kernel") if spec.kernel else ("defaults", "kernel")
        text = spec.kernel or c.topo.defaults.kernel
        if loc not in resolved:
            resolved[loc] = None
            if text != IMAGE_KERNEL and not for_provider(c.topo.provider).kernel_choice:
                c.problem(loc, f"{c.topo.provider} nodes cannot boot a kernel of their own "
                          "(only qemu nodes can)", "use provider: qemu, or drop kernel:")
                continue
            try:
                resolved[loc] = resolve_kernel(text, base)
            except WorkbenchValueError as exc:
                c.problem(loc, exc.message, exc.hint)
        found = resolved[loc]
        if found is not None:
            c.kernels[name] = found


def _check_segment_names(c: Checked) -> None:
    first_use: dict[str, int] = {}
    for i, link in enumerate(c.topo.links):
        name = link.name or f"link{i + 1}"
        other = first_use.setdefault(name, i)
        if other != i:
            if link.name:
                c.problem(
                    ("links", i, "name"),
                    f"segment name {name!r} is already used by links[{other}]",
                    "segment names must be unique",
                )
            else:
                c.problem(
                    ("links", i),
                    f"this link's default name {name!r} is already taken by links[{other}]",
                    f"give links[{other}] another name",
                )
        c.seg_names.append(name)


def _check_endpoints(c: Checked) -> None:
    """Endpoints name defined nodes, each interface joins one link, nodes differ per link."""
    node_names = list(c.specs)
    c.node_ifaces = {n: [] for n in node_names}
    used: dict[tuple[str, str], int] = {}  # (node, ifname) -> link index
    for i, link in enumerate(c.topo.links):
        nodes_here: set[str] = set()
        for j, endpoint in enumerate(link.endpoints):
            node, _, ifname = endpoint.partition(":")
            loc: Loc = ("links", i, "endpoints", j)
            if node not in c.specs:
                c.problem(
                    loc,
                            f"node {show(node)} is not defined under nodes"
                    + did_you_mean(node, node_names),
                    "defined nodes: " + ", ".join(node_names),
                )
            elif node in nodes_here:
                c.problem(
                    loc,
                    f"node {node!r} appears twice in this link",
                    "the endpoints of a link must be on distinct nodes",
                )
            elif (node, ifname) in used:
                other_link = used[node, ifname]
                other_line = c.lines.line_of(("links", other_link, "endpoints"))
                where = f" (line {other_line})" if other_line is not None else ""
                c.problem(
                    loc,
                    f"{endpoint} is already used by links[{other_link}]{where}",
                    f"an interface joins one link only: use another ethN on {node}",
                )
            else:
                nodes_here.add(node)
                used[node, ifname] = i
                c.node_ifaces[node].append((ifname, i, j))
                continue
            c.bad_endpoint = True


def _check_rdma_has_link(c: Checked) -> None:
    """RDMA devices need a data interface to bind to. Not checked when an endpoint was
    wrong: the node without a link is then most likely the one the endpoint meant."""
    if c.bad_endpoint:
        return
    for name, spec in c.specs.items():
        rdma = spec.rdma or c.topo.defaults.rdma
        if rdma != "none" and not c.node_ifaces[name]:
            loc = ("nodes", name, "rdma") if spec.rdma else ("nodes", name)
            c.problem(
                loc,
                f"node {name} has rdma: {rdma} but no data link; add a link or set rdma: none",
                "an RDMA device is bound to the node's first data interface",
            )


def _check_rdma_interfaces(c: Checked) -> None:
    """rdma_interfaces names data interfaces of the node, once each, on a node with a
    device type; qemu nodes only (docker and vagrant name one device per node)."""
    if c.bad_endpoint:
        return
    for name, spec in c.specs.items():
        if spec.rdma_interfaces is None:
            continue
        loc: Loc = ("nodes", name, "rdma_interfaces")
        rdma = spec.rdma or c.topo.defaults.rdma
        if rdma == "none":
            c.problem(loc, f"node {name} has rdma: none, so no RDMA interfaces",
                      "remove rdma_interfaces, or give the node rdma: rxe or siw")
            continue
        if not for_provider(c.topo.provider).several_rdma_devices:
            c.problem(loc, "several RDMA devices per node need provider "
                      f"{' or '.join(offering('several_rdma_devices'))} (this lab "
                      f"is {c.topo.provider})", "remove rdma_interfaces")
            continue
        have = sorted((ifname for ifname, _, _ in c.node_ifaces[name]), key=_ifnum)
        seen: set[str] = set()
        for k, ifname in enumerate(spec.rdma_interfaces):
            if ifname in seen:
                c.problem((*loc, k), f"{ifname} is listed twice", "one device per interface")
            elif ifname not in have:
                c.problem((*loc, k), f"{ifname} is not a data interface of {name} (its "
                          f"interfaces: {', '.join(have) or 'none'})",
                          "list interfaces the node's links use")
            seen.add(ifname)


def _check_explicit_subnets(c: Checked) -> None:
    """Explicit subnets overlap neither each other nor the nodes' management network."""
    c.subnets = [None] * len(c.topo.links)
    seen = Subnets()
    for i, link in enumerate(c.topo.links):
        if link.subnet is None:
            continue
        net = ipaddress.IPv4Network(link.subnet)
        if net.overlaps(MANAGEMENT_NETWORK):
            c.problem(
                ("links", i, "subnet"),
                f"{net} overlaps {MANAGEMENT_NETWORK}, the nodes' management network",
                "the nodes' eth0 (qemu user networking) uses it: choose another subnet",
            )
        clash = seen.first_overlap(net)
        if clash is not None:
            c.addresses_unsure = True
            c.problem(
                ("links", i, "subnet"),
                f"{net} overlaps {c.subnets[clash]} of {c.seg_names[clash]}",
                "each segment needs a subnet of its own",
            )
        seen.add(net, i)
        c.subnets[i] = net


def _assign_pool_subnets(c: Checked) -> None:
    """The links without a subnet get the pool's, in link order (never the first one)."""
    pool = ipaddress.IPv4Network(c.topo.addressing.pool)
    prefix = c.topo.addressing.prefix
    if prefix <= pool.prefixlen:
        c.problem(
            ("addressing", "prefix"),
            f"must be longer than the pool's /{pool.prefixlen} (got {prefix})",
            f"use a prefix from {pool.prefixlen + 1} to {MAX_PREFIX}, or a larger pool",
        )
        return
    auto = [i for i, link in enumerate(c.topo.links) if link.subnet is None]
    taken = [n for n in c.subnets if n is not None] + [MANAGEMENT_NETWORK]
    free = free_subnets(pool, prefix, taken)
    for n_done, i in enumerate(auto):
        subnet = next(free, None)
        if subnet is None:
            c.problem(
                ("addressing", "pool"),
                f"{pool} has room for only {n_done} /{prefix} subnets, the lab needs "
                f"{len(auto)}",
                "use a larger pool or a longer prefix, or give links explicit subnets "
                "(the pool's first subnet is never used)",
            )
            return
        c.subnets[i] = subnet


def _check_segment_sizes(c: Checked) -> None:
    for i, link in enumerate(c.topo.links):
        seg_net = c.subnets[i] if i < len(c.subnets) else None
        if seg_net is not None and len(link.endpoints) > seg_net.num_addresses - 2:
            c.addresses_unsure = True
            c.problem(
                ("links", i, "endpoints"),
                f"{len(link.endpoints)} endpoints do not fit in {seg_net} "
                f"(at most {seg_net.num_addresses - 2} hosts)",
                "give the link a larger subnet, or set a shorter addressing.prefix",
            )


def _router(c: Checked, name: str) -> bool:
    return bool(c.specs[name].router)


def _check_routes(c: Checked) -> None:
    """Explicit routes lead to a network of the lab the node is not on, through a router
    on one of the node's own segments; then the computed routes fill in the rest."""
    has_routing = any(spec.router or spec.routes for spec in c.specs.values())
    if not has_routing:
        return
    caps = for_provider(c.topo.provider)
    if not caps.routing:
        for name, spec in c.specs.items():
            if spec.router or spec.routes:
                key = "router" if spec.router else "routes"
                c.problem(("nodes", name, key), "routers and routes are not supported with "
                          f"provider {c.topo.provider} (its nodes are set up by "
                          f"{caps.node_setup})",
                          f"use provider {' or '.join(offering('routing'))} for a routed lab")
        return
    if c.bad_endpoint or c.addresses_unsure or any(net is None for net in c.subnets):
        return  # addresses are not known: the problem that hides them is reported
    subnets = [net for net in c.subnets if net is not None]
    attachments = {
        node: [(link, subnets[link].network_address + j + 1) for _, link, j in ifaces]
        for node, ifaces in c.node_ifaces.items()
    }
    owners = {address: node for node, ifs in attachments.items() for _, address in ifs}
    computed = computed_routes(attachments, [n for n in c.specs if _router(c, n)], subnets)
    for node, spec in c.specs.items():
        explicit: list[tuple[ipaddress.IPv4Network, ipaddress.IPv4Address]] = []
        for k, route in enumerate(spec.routes or ()):
            checked = _check_route(c, node, k, route.to, route.via, attachments, owners,
                                   subnets, [to for to, _ in explicit])
            if checked:
                explicit.append(checked)
        covered = [to for to, _ in explicit]
        c.routes[node] = explicit + [(to, via) for to, via in computed[node]
                                     if not any(to.subnet_of(e) for e in covered)]


def _check_route(
    c: Checked, node: str, k: int, to_text: str, via_text: str,
    attachments: dict[str, list[tuple[int, ipaddress.IPv4Address]]],
    owners: dict[ipaddress.IPv4Address, str], subnets: list[ipaddress.IPv4Network],
    earlier: list[ipaddress.IPv4Network],
) -> tuple[ipaddress.IPv4Network, ipaddress.IPv4Address] | None:
    to, via = ipaddress.IPv4Network(to_text), ipaddress.IPv4Address(via_text)
    loc: Loc = ("nodes", node, "routes", k)
    own = [(link, subnets[link]) for link, _ in attachments[node]]
    if not any(to.overlaps(net) for net in subnets):
        c.problem((*loc, "to"), f"{to} is not a network of this lab: no segment is in it",
                  "segments: " + ", ".join(f"{c.seg_names[i]} {net}"
                                           for i, net in enumerate(subnets)))
        return None
    for link, net in own:
        if to.subnet_of(net):
            c.problem((*loc, "to"), f"{to} is on {node}'s own segment {c.seg_names[link]} "
                      f"({net}): reached without a gateway", "remove this route")
            return None
    if to in earlier:
        c.problem((*loc, "to"), f"{node} already has a route to {to}",
                  "give each destination one route")
        return None
    gateway_net = next(((link, net) for link, net in own if via in net), None)
    if gateway_net is None:
        where = ", ".join(f"{c.seg_names[i]} {net}" for i, net in own) or "none"
        c.problem((*loc, "via"), f"gateway {via} is not on a segment of {node} "
                  f"(its segments: {where})",
                  f"a gateway is a router's address on one of {node}'s own segments")
        return None
    holder = owners.get(via)
    link, net = gateway_net
    if holder == node:
        c.problem((*loc, "via"), f"gateway {via} is {node}'s own address",
                  "use the address of a router on the same segment")
    elif holder is None:
        there = ", ".join(f"{a} {n}" for n, ifs in attachments.items() for seg, a in ifs
                          if seg == link)
        c.problem((*loc, "via"), f"no node has {via} on {c.seg_names[link]} ({net})",
                  f"addresses there: {there}")
    elif not _router(c, holder):
        c.problem((*loc, "via"), f"gateway {via} is {holder}'s address, but {holder} is "
                  "not a router", f"set `router: true` on {holder} (it then forwards "
                  "between its segments)")
    else:
        return to, via
    return None


def _check_hosts(c: Checked) -> None:
    """`hosts:` is a docker provider key; every node's `host:` names one of them; no two
    hosts share an engine (one engine cannot be two swarm nodes)."""
    hosts = c.topo.hosts
    if hosts and not for_provider(c.topo.provider).hosts:
        placing = " or ".join(offering("hosts"))
        c.problem(("hosts",), f"hosts need provider: {placing} (this lab's provider is "
                  f"{c.topo.provider})", f"remove hosts:, or set provider: {placing}")
        return
    seen: dict[str, str] = {}
    for name, engine in hosts.items():
        if engine in seen:
            c.problem(("hosts", name), f"hosts {seen[engine]} and {name} name the same "
                      f"engine {engine}", "give each host its own engine")
        seen.setdefault(engine, name)
    for name, spec in c.specs.items():
        if spec.host is None:
            continue
        if not hosts:
            c.problem(("nodes", name, "host"), f"node {name} names host {spec.host}, but "
                      "the topology has no hosts:", "add hosts: {NAME: ENGINE, ...} "
                      "(docs/multi-host.md)")
        elif spec.host not in hosts:
            known = sorted(hosts)
            c.problem(("nodes", name, "host"), f"unknown host {show(spec.host)}"
                      + did_you_mean(spec.host, known), f"hosts: {', '.join(known)}")


def placement(topo: Topology, specs: dict[str, NodeSpec]) -> dict[str, str]:
    """node -> host: its own `host:`, else round-robin over `hosts` in node order (the
    k-th node of the file, counting from 0, goes to the (k mod n)-th host)."""
    hosts = list(topo.hosts)
    if not hosts:
        return {}
    return {name: spec.host or hosts[k % len(hosts)]
            for k, (name, spec) in enumerate(specs.items())}


def build_lab(c: Checked, source: str | None) -> Lab:
    """The Lab of a checked topology: defaults applied, addresses and MACs assigned."""
    topo, d = c.topo, c.topo.defaults
    segments: list[Segment] = []
    addresses: dict[tuple[str, str], str] = {}
    for i, link in enumerate(topo.links):
        seg_net = c.subnets[i]
        assert seg_net is not None
        for j, endpoint in enumerate(link.endpoints):
            node, _, ifname = endpoint.partition(":")
            addresses[node, ifname] = f"{seg_net.network_address + j + 1}/{seg_net.prefixlen}"
        segments.append(
            Segment(
                index=i,
                name=c.seg_names[i],
                kind="p2p" if len(link.endpoints) == 2 else "switch",
                subnet=str(seg_net),
                mtu=link.mtu or d.mtu,
                endpoints=tuple(link.endpoints),
            )
        )
    nodes: list[Node] = []
    for index, (name, spec) in enumerate(c.specs.items(), start=1):
        ifaces = sorted(c.node_ifaces[name], key=lambda t: _ifnum(t[0]))
        nodes.append(
            Node(
                name=name,
                index=index,
                rdma=spec.rdma or d.rdma,
                memory_mib=spec.memory or d.memory,
                cpus=spec.cpus or d.cpus,
                image=spec.image or d.image,
                packages=tuple(sorted({*d.packages, *(spec.packages or [])})),
                mounts=tuple(c.mounts.get(name, ())),
                kernel=c.kernels.get(name, IMAGE_KERNEL),
                interfaces=tuple(
                    Interface(
                        name=ifname,
                        segment=seg,
                        mac=_mac(topo.name, index, _ifnum(ifname)),
                        ipv4=addresses[name, ifname],
                        mtu=segments[seg].mtu,
                    )
                    for ifname, seg, _ in ifaces
                ),
                router=bool(spec.router),
                rdma_ifnames=tuple(spec.rdma_interfaces or ()),
                routes=tuple(Route(str(to), str(via)) for to, via in c.routes.get(name, ())),
            )
        )
    # Only labs with hosts: carry them, so every other lab.json stays as it was.
    options = ({"hosts": dict(topo.hosts), "placement": placement(topo, c.specs)}
               if topo.hosts else {})
    return Lab(
        name=topo.name,
        provider=topo.provider,
        source=source if source is not None else c.file,
        nodes=tuple(nodes),
        segments=tuple(segments),
        provider_options=options,
    )
