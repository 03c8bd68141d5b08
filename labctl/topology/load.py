"""Topology files: read (YAML), validate (model + cross checks), resolve (augment) to a Lab.

Stages, each usable on its own:

- `load_topology(path)`: YAML text -> composed node tree (positions kept, duplicate keys
  refused) -> `Topology` model -> cross checks. Returns the validated `Topology`.
- `resolve(topo, source)`: defaults applied, subnets, addresses and MACs assigned -> `Lab`.
- `load_lab(path)`: both.

Every failure is one `TopologyError` naming the file, the line and the field: of all the
problems found in a stage, the one on the earliest line.
"""

from __future__ import annotations

import difflib
import hashlib
import ipaddress
import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from labctl.topology.errors import DEFAULT_HINT, TopologyError
from labctl.topology.model import (
    ENDPOINT_RE,
    IMAGE_RE,
    LAB_NAME_RE,
    MAX_NODES,
    MAX_PREFIX,
    MODEL_KEYS,
    NODE_NAME_RE,
    NodeSpec,
    Topology,
)
from labctl.topology.resolved import Interface, Lab, Node, Segment

Loc = tuple[str | int, ...]

__all__ = [
    "TopologyError",
    "json_schema",
    "load_lab",
    "load_topology",
    "resolve",
    "schema_text",
]


# --------------------------------------------------------------------------- public API


def load_topology(path: str | Path) -> Topology:
    """Read and validate a topology file; raise `TopologyError` on the first problem."""
    file = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise TopologyError(
            file,
            None,
            "",
            f"cannot read the topology file: {exc.strerror or exc}",
            hint="check the path; topology files live under topologies/",
        ) from None
    return parse_topology(raw, file)


def parse_topology(text: str | bytes, file: str = "<topology>") -> Topology:
    """Validate a topology given as YAML text; `file` is only used in messages."""
    if isinstance(text, bytes):
        raw = text
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            raise TopologyError(
                file,
                line,
                "",
                "the file is not UTF-8 text",
                hint="save the file as UTF-8",
            ) from None
    root, data = _read_yaml(text, file)
    if not isinstance(data, dict):
        line = 1 if root is None else root.start_mark.line + 1
        got = "empty" if data is None else f"a YAML {_kind(data)}"
        raise TopologyError(
            file,
            line,
            "",
            f"a topology must be a mapping with at least `name` and `nodes` (the file is {got})",
            hint="start from topologies/two-node.yaml",
        )
    try:
        topo = Topology.model_validate(data)
    except ValidationError as exc:
        problems = [_problem_from_pydantic(err) for err in exc.errors()]
        raise _first(problems, file, root) from None
    topo._yaml_root = root
    topo._source = file
    _analyse(topo)  # cross checks: raises on the first problem
    return topo


def resolve(topo: Topology, source: str) -> Lab:
    """Apply defaults and assign subnets, addresses and MACs: the Lab providers build.

    `source` is recorded in the Lab (the topology file's path). Raises `TopologyError`
    when the topology is inconsistent (with line numbers if it came from a file).
    """
    return _analyse(topo, source)


def load_lab(path: str | Path) -> Lab:
    """`load_topology` then `resolve`: a topology file to its Lab."""
    return resolve(load_topology(path), str(path))


def json_schema() -> dict[str, Any]:
    """The JSON Schema of topology files (for editors: yaml-language-server, VS Code...)."""
    return Topology.model_json_schema()


def schema_text() -> str:
    """`json_schema()` as the text of topologies/schema.json."""
    return json.dumps(json_schema(), indent=2) + "\n"


# --------------------------------------------------------------------------- YAML reading


def _read_yaml(text: str, file: str) -> tuple[yaml.Node | None, Any]:
    """Compose the document (positions kept), refuse duplicate keys, then construct it."""
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)
        root = loader.get_single_node()
        if root is not None:
            dup = _first_duplicate_key(root)
            if dup is not None:
                raise dup.error(file)
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "cannot parse"
        if exc.context and exc.problem:
            problem = f"{problem} ({exc.context})"
        raise TopologyError(
            file,
            line,
            "",
            f"invalid YAML: {problem}",
            hint="check indentation (spaces, not tabs), colons and quoting on or just "
            "before this line",
        ) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow
        line = text[: exc.position].count("\n") + 1
        raise TopologyError(
            file,
            line,
            "",
            f"invalid YAML: character #x{exc.character:04x} is not allowed ({exc.reason})",
            hint="remove control characters from the file",
        ) from None
    finally:
        if loader is not None:
            loader.dispose()
    return root, data


@dataclass
class _Duplicate:
    loc: Loc
    line: int
    first_line: int

    def error(self, file: str) -> TopologyError:
        key = self.loc[-1]
        return TopologyError(
            file,
            self.line,
            _field(self.loc),
            f"duplicate key {key!r} (first at line {self.first_line})",
            hint="YAML would keep only the last one: rename one of them or merge them",
        )


def _first_duplicate_key(root: yaml.Node) -> _Duplicate | None:
    found: list[_Duplicate] = []
    seen_nodes: set[int] = set()

    def walk(node: yaml.Node, loc: Loc) -> None:
        if id(node) in seen_nodes:  # aliases (and recursive ones) are walked once
            return
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    line = key.start_mark.line + 1
                    if key.value in first:
                        found.append(_Duplicate((*loc, key.value), line, first[key.value]))
                    else:
                        first[key.value] = line
                    walk(value, (*loc, key.value))
                else:
                    walk(value, loc)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*loc, i))

    walk(root, ())
    return min(found, key=lambda d: d.line) if found else None


def _line_of(root: yaml.Node | None, loc: Loc) -> int | None:
    """Line (1-based) of the key at `loc`, or of the closest parent found in the file."""
    if root is None:
        return None
    node = root
    line = root.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = None
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                    match = (key, value)  # the last one wins, as in the constructed data
            if match is None:
                break
            line = match[0].start_mark.line + 1
            node = match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if not 0 <= part < len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


# --------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class _Problem:
    loc: Loc
    message: str
    hint: str = DEFAULT_HINT


def _first(problems: Sequence[_Problem], file: str, root: yaml.Node | None) -> TopologyError:
    """The problem on the earliest line (ties: the order found) as a TopologyError."""
    located = [(_line_of(root, p.loc), i, p) for i, p in enumerate(problems)]
    line, _, problem = min(located, key=lambda t: (math.inf if t[0] is None else t[0], t[1]))
    return TopologyError(file, line, _field(problem.loc), problem.message, problem.hint)


def _field(loc: Loc) -> str:
    """`nodes.node1.rdma`, `links[0].endpoints[1]`, `nodes['my node']`: path of a key."""
    out = ""
    for k, part in enumerate(loc):
        if part == "[key]":
            continue
        is_key = k + 1 < len(loc) and loc[k + 1] == "[key]"  # a mapping key, maybe an int
        if isinstance(part, int) and not is_key:
            out += f"[{part}]"
        elif not re.fullmatch(r"[A-Za-z0-9_-]+", str(part)):  # odd keys: quoted
            out += f"[{str(part)!r}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _show(value: Any) -> str:
    """A value as the user wrote it in YAML, roughly."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return repr(value)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return "list"
    return "scalar"


def _did_you_mean(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


# Human ranges of numeric keys, by key name.
_RANGES = {
    "memory": (128, 65536, " MiB"),
    "cpus": (1, 64, ""),
    "mtu": (576, 9000, ""),
    "prefix": (1, MAX_PREFIX, ""),
}

_EXAMPLES = {
    "name": "name: my-lab",
    "nodes": "nodes: {node1: {}, node2: {}}",
    "endpoints": "endpoints: [node1:eth1, node2:eth1]",
}

_MAPPING_HINTS = {
    "defaults": "defaults takes keys: " + ", ".join(MODEL_KEYS["defaults"]),
    "addressing": "addressing takes keys: " + ", ".join(MODEL_KEYS["addressing"]),
    "nodes": "write nodes as a mapping: `nodes: {node1: {}, node2: {rdma: siw}}`",
    "node": "a node is a mapping of " + ", ".join(MODEL_KEYS["node"]) + " (all optional), or empty",
    "link": "a link is a mapping like `- endpoints: [node1:eth1, node2:eth1]`",
}


def _context(loc: Loc) -> str:
    """Which model the mapping at `loc` is: topology, defaults, addressing, node or link."""
    if not loc:
        return "topology"
    if loc[0] in ("defaults", "addressing", "nodes") and len(loc) == 1:
        return str(loc[0])
    if loc[0] == "nodes" and len(loc) == 2:
        return "node"
    if loc[0] == "links" and len(loc) == 2:
        return "link"
    return "?"


def _explain_pattern(pattern: str, value: str) -> tuple[str, str]:
    got = f"(got {value!r})"
    if pattern == LAB_NAME_RE:
        return (
            f"must be a lowercase letter then up to 19 of a-z, 0-9 and '-' {got}",
            "lab names end up in network namespace names: keep them short and lowercase",
        )
    if pattern == NODE_NAME_RE:  # also LINK_NAME_RE
        return (
            f"must be a lowercase letter then up to 14 of a-z, 0-9 and '-' {got}",
            "names end up in interface and host names: keep them short and lowercase",
        )
    if pattern == IMAGE_RE:
        return (
            f"must start with a-z or 0-9 and hold only a-z, 0-9, '.', '_' and '-' {got}",
            "`labctl image list` shows the images built",
        )
    if pattern == ENDPOINT_RE:
        hint = 'write endpoints as "node:ethN" with N in 1..99, e.g. node1:eth1'
        node, sep, ifname = value.partition(":")
        if not sep:
            return f"must be node:interface like node1:eth1 {got}", hint
        if not re.fullmatch(NODE_NAME_RE, node):
            return f"{node!r} is not a valid node name {got}", hint
        if ifname == "eth0":
            return (
                f"eth0 is the management interface; data links use eth1..eth99 {got}",
                "number data interfaces from eth1",
            )
        return f"the interface must be eth1..eth99 {got}", hint
    return f"must match {pattern} {got}", DEFAULT_HINT


def _problem_from_pydantic(err: ErrorDetails) -> _Problem:
    loc: Loc = tuple(err["loc"])
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    key = next((str(p) for p in reversed(loc) if isinstance(p, str) and p != "[key]"), "")

    if kind == "missing":
        example = _EXAMPLES.get(key)
        return _Problem(
            loc, "required key missing", f"add it, e.g. `{example}`" if example else DEFAULT_HINT
        )
    if kind == "extra_forbidden":
        context = _context(loc[:-1])
        allowed = MODEL_KEYS.get(context, ())
        message = f"unknown key {key!r}" + _did_you_mean(key, allowed)
        hint = f"keys allowed here: {', '.join(allowed)}" if allowed else DEFAULT_HINT
        if context == "node" and key == "mtu":
            hint = "the MTU is set per link (links[].mtu) or for all links (defaults.mtu)"
        elif context == "node" and key in ("links", "interfaces", "endpoints"):
            hint = "connect nodes under the top-level links: `- endpoints: [a:eth1, b:eth1]`"
        return _Problem(loc, message, hint)
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        message = f"must be one of {', '.join(choices)} (got {_show(value)})"
        hint = f"use one of: {', '.join(choices)}"
        if isinstance(value, str):
            close = difflib.get_close_matches(value, choices, n=1, cutoff=0.5)
            if close:
                hint = f"did you mean {close[0]!r}? ({hint})"
        if value is False and key == "rdma":
            hint = "write `rdma: none` (YAML reads a bare no/off/false as a boolean)"
        return _Problem(loc, message, hint)
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return _Problem(loc, f"must be an integer (got {_show(value)})", _range_hint(key))
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        if key in _RANGES:
            low, high, unit = _RANGES[key]
            message = f"must be {low}..{high}{unit} (got {value})"
        elif "ge" in ctx:
            message = f"must be at least {ctx['ge']} (got {value})"
        else:
            message = f"must be at most {ctx.get('le')} (got {value})"
        return _Problem(loc, message, _range_hint(key))
    if kind == "string_type":
        if loc and loc[-1] == "[key]":
            return _Problem(
                loc,
                f"names must be strings (got {_show(value)})",
                "start names with a lowercase letter, e.g. node1",
            )
        if key == "endpoints":
            return _Problem(
                loc,
                f"must be a string like node1:eth1 (got {_show(value)})",
                'write endpoints as "node:ethN", e.g. node1:eth1',
            )
        return _Problem(loc, f"must be a string (got {_show(value)})")
    if kind == "string_pattern_mismatch":
        message, hint = _explain_pattern(str(ctx.get("pattern", "")), str(value))
        return _Problem(loc, message, hint)
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        context = _context(loc)
        hint = _MAPPING_HINTS.get(context, DEFAULT_HINT)
        if context == "node":
            return _Problem(
                loc, f"must be a mapping of node settings or empty (got {_show(value)})", hint
            )
        return _Problem(loc, f"must be a mapping (got {_show(value)})", hint)
    if kind == "list_type":
        if key == "endpoints":
            return _Problem(
                loc,
                f"must be a list like [node1:eth1, node2:eth1] (got {_show(value)})",
                "separate endpoints with commas inside [ ], or write one `- node:ethN` per line",
            )
        return _Problem(
            loc,
            f"must be a list (got {_show(value)})",
            "write links as a list: `links:` then `- endpoints: [node1:eth1, node2:eth1]`",
        )
    if kind == "too_short":
        if key == "nodes":
            return _Problem(loc, "at least one node is required", f"e.g. `{_EXAMPLES['nodes']}`")
        got = len(value) if isinstance(value, list | tuple | dict | str) else "?"
        return _Problem(
            loc,
            f"a link needs at least 2 endpoints (got {got})",
            "list both ends of the link, e.g. `endpoints: [node1:eth1, node2:eth1]`",
        )
    if kind in ("ipv4_network", "ipv4_private", "ipv4_prefix"):
        return _Problem(
            loc,
            err["msg"],
            "write a private network in CIDR form, e.g. 10.77.0.0/16 or 192.168.50.0/24",
        )
    # Anything else pydantic may say (recursive aliases, odd YAML types...).
    msg = err["msg"]
    return _Problem(loc, (msg[:1].lower() + msg[1:]) + f" (got {_show(value)})")


def _range_hint(key: str) -> str:
    if key in _RANGES:
        low, high, unit = _RANGES[key]
        return f"{key} takes a whole number from {low} to {high}{unit}"
    return DEFAULT_HINT


# --------------------------------------------------------------------------- cross checks
# and resolution


def _mac(lab_name: str, node_index: int, ifnum: int) -> str:
    h = hashlib.sha256(lab_name.encode()).digest()
    return f"02:{h[0]:02x}:{h[1]:02x}:{h[2]:02x}:{node_index:02x}:{ifnum:02x}"


def _ifnum(ifname: str) -> int:
    return int(ifname[3:])


def _free_subnets(
    pool: ipaddress.IPv4Network, prefix: int, taken: Sequence[ipaddress.IPv4Network]
) -> Iterator[ipaddress.IPv4Network]:
    """Subnets of `pool` in order, from its second one, skipping any overlapping `taken`."""
    size = 2 ** (32 - prefix)
    base = int(pool.network_address)
    count = 2 ** (prefix - pool.prefixlen)
    k = 1
    while k < count:
        candidate = ipaddress.IPv4Network((base + k * size, prefix))
        clash = next((t for t in taken if t.overlaps(candidate)), None)
        if clash is None:
            yield candidate
            k += 1
        else:  # jump past the explicit subnet
            k = max(k + 1, -(-(int(clash.broadcast_address) + 1 - base) // size))


def _analyse(topo: Topology, source: str | None = None) -> Lab:
    """Cross checks and resolution in one pass; raise the earliest problem, else the Lab."""
    problems: list[_Problem] = []

    def problem(loc: Loc, message: str, hint: str = DEFAULT_HINT) -> None:
        problems.append(_Problem(loc, message, hint))

    root = topo._yaml_root
    file = topo._source or source or "<topology>"
    d = topo.defaults
    node_names = list(topo.nodes)
    specs = {name: spec or NodeSpec() for name, spec in topo.nodes.items()}

    if len(node_names) > MAX_NODES:
        problem(
            ("nodes",),
            f"too many nodes: {len(node_names)} (at most {MAX_NODES})",
            "split the lab in two",
        )

    # Endpoints: defined nodes, interfaces used once, distinct nodes per link.
    seg_names: list[str] = []
    used: dict[tuple[str, str], int] = {}  # (node, ifname) -> link index
    node_ifaces: dict[str, list[tuple[str, int, int]]] = {n: [] for n in node_names}
    bad_endpoint = False
    for i, link in enumerate(topo.links):
        name = link.name or f"link{i + 1}"
        if name in seg_names:
            other = seg_names.index(name)
            if link.name:
                problem(
                    ("links", i, "name"),
                    f"segment name {name!r} is already used by links[{other}]",
                    "segment names must be unique",
                )
            else:
                problem(
                    ("links", i),
                    f"this link's default name {name!r} is already taken by links[{other}]",
                    f"give links[{other}] another name",
                )
        seg_names.append(name)
        nodes_here: set[str] = set()
        for j, endpoint in enumerate(link.endpoints):
            node, _, ifname = endpoint.partition(":")
            loc: Loc = ("links", i, "endpoints", j)
            if node not in specs:
                problem(
                    loc,
                    f"node {node!r} is not defined under nodes" + _did_you_mean(node, node_names),
                    "defined nodes: " + ", ".join(node_names),
                )
                bad_endpoint = True
                continue
            if node in nodes_here:
                problem(
                    loc,
                    f"node {node!r} appears twice in this link",
                    "the endpoints of a link must be on distinct nodes",
                )
                bad_endpoint = True
                continue
            nodes_here.add(node)
            if (node, ifname) in used:
                other_link = used[node, ifname]
                other_line = _line_of(root, ("links", other_link, "endpoints"))
                where = f" (line {other_line})" if other_line is not None else ""
                problem(
                    loc,
                    f"{endpoint} is already used by links[{other_link}]{where}",
                    f"an interface joins one link only: use another ethN on {node}",
                )
                bad_endpoint = True
                continue
            used[node, ifname] = i
            node_ifaces[node].append((ifname, i, j))

    # RDMA devices need a data interface to bind to. Not checked when an endpoint was
    # wrong: the node without a link is then most likely the one the endpoint meant.
    for name in node_names if not bad_endpoint else ():
        rdma = specs[name].rdma or d.rdma
        if rdma != "none" and not node_ifaces[name]:
            loc = ("nodes", name, "rdma") if specs[name].rdma else ("nodes", name)
            problem(
                loc,
                f"node {name} has rdma: {rdma} but no data link; add a link or set rdma: none",
                "an RDMA device is bound to the node's first data interface",
            )

    # Subnets: explicit ones must not overlap; the others come from the pool in link order.
    pool = ipaddress.IPv4Network(topo.addressing.pool)
    prefix = topo.addressing.prefix
    prefix_ok = prefix > pool.prefixlen
    if not prefix_ok:
        problem(
            ("addressing", "prefix"),
            f"must be longer than the pool's /{pool.prefixlen} (got {prefix})",
            f"use a prefix from {pool.prefixlen + 1} to {MAX_PREFIX}, or a larger pool",
        )
    explicit: list[tuple[int, ipaddress.IPv4Network]] = []
    for i, link in enumerate(topo.links):
        if link.subnet is None:
            continue
        net = ipaddress.IPv4Network(link.subnet)
        clash = next(((k, n) for k, n in explicit if n.overlaps(net)), None)
        if clash is not None:
            problem(
                ("links", i, "subnet"),
                f"{net} overlaps {clash[1]} of {seg_names[clash[0]]}",
                "each segment needs a subnet of its own",
            )
        explicit.append((i, net))
    subnets: list[ipaddress.IPv4Network | None] = [None] * len(topo.links)
    for i, net in explicit:
        subnets[i] = net
    if prefix_ok:
        auto = [i for i, link in enumerate(topo.links) if link.subnet is None]
        free = _free_subnets(pool, prefix, [n for _, n in explicit])
        for n_done, i in enumerate(auto):
            subnet = next(free, None)
            if subnet is None:
                problem(
                    ("addressing", "pool"),
                    f"{pool} has room for only {n_done} /{prefix} subnets, the lab needs "
                    f"{len(auto)}",
                    "use a larger pool or a longer prefix, or give links explicit subnets "
                    "(the pool's first subnet is never used)",
                )
                break
            subnets[i] = subnet
    for i, link in enumerate(topo.links):
        seg_net = subnets[i]
        if seg_net is not None and len(link.endpoints) > seg_net.num_addresses - 2:
            problem(
                ("links", i, "endpoints"),
                f"{len(link.endpoints)} endpoints do not fit in {seg_net} "
                f"(at most {seg_net.num_addresses - 2} hosts)",
                "give the link a larger subnet, or set a shorter addressing.prefix",
            )

    if problems:
        raise _first(problems, file, root)

    # Build the Lab.
    segments: list[Segment] = []
    addresses: dict[tuple[str, str], str] = {}
    for i, link in enumerate(topo.links):
        seg_net = subnets[i]
        assert seg_net is not None
        for j, endpoint in enumerate(link.endpoints):
            node, _, ifname = endpoint.partition(":")
            addresses[node, ifname] = f"{seg_net.network_address + j + 1}/{seg_net.prefixlen}"
        segments.append(
            Segment(
                index=i,
                name=seg_names[i],
                kind="p2p" if len(link.endpoints) == 2 else "switch",
                subnet=str(seg_net),
                mtu=link.mtu or d.mtu,
                endpoints=tuple(link.endpoints),
            )
        )
    nodes: list[Node] = []
    for index, name in enumerate(node_names, start=1):
        spec = specs[name]
        ifaces = sorted(node_ifaces[name], key=lambda t: _ifnum(t[0]))
        nodes.append(
            Node(
                name=name,
                index=index,
                rdma=spec.rdma or d.rdma,
                memory_mib=spec.memory or d.memory,
                cpus=spec.cpus or d.cpus,
                image=spec.image or d.image,
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
            )
        )
    return Lab(
        name=topo.name,
        provider=topo.provider,
        source=source if source is not None else file,
        nodes=tuple(nodes),
        segments=tuple(segments),
    )
