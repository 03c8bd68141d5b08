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

import bisect
import difflib
import hashlib
import ipaddress
import json
import os
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from labctl.errors import short_repr
from labctl.images.recipes import RECIPES
from labctl.topology.errors import DEFAULT_HINT, TopologyError
from labctl.topology.model import (
    ENDPOINT_RE,
    IMAGE_RE,
    LAB_NAME_RE,
    MANAGEMENT_NETWORK,
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
    return _load(path)[0]


def parse_topology(text: str | bytes, file: str = "<topology>") -> Topology:
    """Validate a topology given as YAML text; `file` is only used in messages."""
    return _parse(text, file)[0]


def resolve(topo: Topology, source: str) -> Lab:
    """Apply defaults and assign subnets, addresses and MACs: the Lab providers build.

    `source` is recorded in the Lab (the topology file's path). Raises `TopologyError`
    when the topology is inconsistent (with line numbers if it came from a file).
    """
    return _build_lab(_cross_check(topo, source), source)


def load_lab(path: str | Path) -> Lab:
    """`load_topology` then `resolve`: a topology file to its Lab (checked and resolved once)."""
    _, checked = _load(path)
    return _build_lab(checked, str(path))


def read_lab_name(path: str | Path) -> str:
    """Only the `name` of a topology file (for `down`): the rest may be broken.

    The file is read with the same bounds as `load_topology`; a missing or invalid name
    is a `TopologyError`."""
    file = str(path)
    root, data = _read_yaml(_decode(read_topology_bytes(path), file), file)
    name = data.get("name") if isinstance(data, dict) else None
    line = _LineIndex(root).line_of(("name",))
    if not isinstance(name, str) or not re.fullmatch(LAB_NAME_RE, name):
        got = "no name" if name is None else f"name {_show(name)}"
        raise TopologyError(file, line, "name", f"cannot tell the lab from this file ({got})",
                            hint="use --lab NAME")
    return name


def _load(path: str | Path) -> tuple[Topology, _Checked]:
    return _parse(read_topology_bytes(path), str(path))


def _parse(text: str | bytes, file: str) -> tuple[Topology, _Checked]:
    if isinstance(text, bytes):
        text = _decode(text, file)
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
    return topo, _cross_check(topo)  # raises on the first problem


def json_schema() -> dict[str, Any]:
    """The JSON Schema of topology files (for editors: yaml-language-server, VS Code...)."""
    return Topology.model_json_schema()


def schema_text() -> str:
    """`json_schema()` as the text of topologies/schema.json."""
    return json.dumps(json_schema(), indent=2) + "\n"


# --------------------------------------------------------------------------- file reading

# Bounds on what a topology file may cost to read: a real one is a few hundred bytes, a
# dozen levels deep and has no more YAML nodes than it has lines.
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 32  # nested mappings/lists (the composer recurses: 500 `[` hit RecursionError)
MAX_YAML_NODES = 200_000  # after aliases are expanded (a "billion laughs" file is small)

_READ_HINT = "check the path; topology files live under topologies/"


def read_topology_bytes(path: str | Path) -> bytes:
    """The bytes of a topology file: a regular file only, at most MAX_FILE_BYTES.

    stat() before open: a FIFO would block open() and read(), a device (/dev/zero)
    never ends. O_NONBLOCK covers a file swapped for a FIFO between the two calls."""
    file = str(path)

    def refuse(message: str, hint: str = _READ_HINT) -> TopologyError:
        return TopologyError(file, None, "", message, hint=hint)

    def check(st: os.stat_result) -> None:
        if stat.S_ISDIR(st.st_mode):
            raise refuse("cannot read the topology file: it is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise refuse(f"cannot read the topology file: it is a {_file_kind(st.st_mode)}, not "
                         "a regular file", hint="give the path of a YAML file (pipes, devices "
                         "and sockets are not read)")
        if st.st_size > MAX_FILE_BYTES:
            raise _too_big(file, st.st_size)

    try:
        check(os.stat(path))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            check(os.fstat(fd))
            chunks: list[bytes] = []
            size = 0
            while size <= MAX_FILE_BYTES:
                chunk = os.read(fd, MAX_FILE_BYTES + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            os.close(fd)
    except OSError as exc:
        raise refuse(f"cannot read the topology file: {exc.strerror or exc}") from None
    if size > MAX_FILE_BYTES:  # it grew while being read
        raise _too_big(file, size)
    return b"".join(chunks)


def _too_big(file: str, size: int) -> TopologyError:
    return TopologyError(
        file, None, "",
        f"the file is too large for a topology ({size} bytes; at most {MAX_FILE_BYTES})",
        hint="a topology file is a few kilobytes: check that this is the right file",
    )


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "named pipe (FIFO)"), (stat.S_ISCHR, "character device"),
             (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))
    return next((name for test, name in kinds if test(mode)), "special file")


def _decode(raw: bytes, file: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise TopologyError(
            file,
            line,
            "",
            "the file is not UTF-8 text",
            hint="save the file as UTF-8",
        ) from None


# --------------------------------------------------------------------------- YAML reading


class _TooDeep(Exception):
    def __init__(self, mark: yaml.Mark) -> None:
        super().__init__("too deep")
        self.mark = mark


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer refuses documents nested deeper than MAX_DEPTH."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooDeep(self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _expanded_size(root: yaml.Node) -> int:
    """How many YAML nodes the document has once every alias is expanded (linear time)."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        sizes[id(node)] = 1  # a recursive alias counts once; validation refuses it later
        total = 1
        if isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total += sum(size(item) for item in node.value)
        total = min(total, MAX_YAML_NODES + 1)
        sizes[id(node)] = total
        return total

    return size(root)


def _read_yaml(text: str, file: str) -> tuple[yaml.Node | None, Any]:
    """Compose the document (positions kept), refuse duplicate keys, then construct it."""
    loader: yaml.SafeLoader | None = None
    try:
        loader = _BoundedLoader(text)
        root = loader.get_single_node()
        if root is not None:
            if _expanded_size(root) > MAX_YAML_NODES:
                raise TopologyError(
                    file, root.start_mark.line + 1, "",
                    f"the document expands to more than {MAX_YAML_NODES} YAML nodes "
                    "(through aliases)",
                    hint="write the topology without nested aliases (*name)",
                )
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
    except _TooDeep as exc:
        raise TopologyError(
            file,
            exc.mark.line + 1,
            "",
            f"invalid YAML: nested deeper than {MAX_DEPTH} levels",
            hint="a topology is a few levels deep: check the brackets and indentation",
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


class _LineIndex:
    """Lines of keys in the composed document. Each mapping's keys are indexed once, so
    locating N problems costs O(N * depth), not O(N * keys) (20k unknown keys once took
    96 s: every problem scanned the whole mapping)."""

    def __init__(self, root: yaml.Node | None) -> None:
        self.root = root
        self._keys: dict[int, dict[str, tuple[yaml.Node, yaml.Node]]] = {}

    def _mapping(self, node: yaml.MappingNode) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        keys = self._keys.get(id(node))
        if keys is None:
            keys = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    keys[key.value] = (key, value)  # the last one wins, as in the data
            self._keys[id(node)] = keys
        return keys

    def line_of(self, loc: Loc) -> int | None:
        """Line (1-based) of the key at `loc`, or of the closest parent found in the file."""
        if self.root is None:
            return None
        node = self.root
        line = node.start_mark.line + 1
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                match = self._mapping(node).get(str(part))
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
    # A missing key is reported at its parent's line (line 1 for a top-level key), and is
    # often only the echo of a misspelled one (`Nodes:`): it never wins over another problem.
    secondary: bool = False


def _first(
    problems: Sequence[_Problem], file: str, root: yaml.Node | _LineIndex | None
) -> TopologyError:
    """The problem on the earliest line (ties: the order found) as a TopologyError;
    missing keys come after every other problem."""
    index = root if isinstance(root, _LineIndex) else _LineIndex(root)
    best: tuple[bool, float, int] | None = None
    chosen: tuple[int | None, _Problem] | None = None
    for i, problem in enumerate(problems):
        line = index.line_of(problem.loc)
        rank = (problem.secondary, float("inf") if line is None else line, i)
        if best is None or rank < best:
            best, chosen = rank, (line, problem)
    assert chosen is not None
    line, problem = chosen
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
        elif len(str(part)) > _MAX_SHOWN or not re.fullmatch(r"[A-Za-z0-9_-]+", str(part)):
            # odd (or very long) keys: quoted, cut
            out += f"[{short_repr(str(part))}]"
        else:
            out += f".{part}" if out else str(part)
    return out


_MAX_SHOWN = 60  # characters of a user's value echoed in a message


def _show(value: Any) -> str:
    """A value as the user wrote it in YAML, roughly (long ones cut with an ellipsis)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return short_repr(value, _MAX_SHOWN)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return "list"
    return "scalar"


def _did_you_mean(word: str, choices: Sequence[str]) -> str:
    same_but_case = [c for c in choices if c.lower() == word.lower()]
    if same_but_case:  # `Nodes:`: keys are lowercase
        return f"; did you mean {same_but_case[0]!r}? (keys are case-sensitive)"
    if len(word) > 2 * _MAX_SHOWN:  # no key or name is that long; spare difflib the work
        return ""
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
    got = f"(got {_show(value)})"
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
            return f"{_show(node)} is not a valid node name {got}", hint
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
            loc,
            "required key missing",
            f"add it, e.g. `{example}`" if example else DEFAULT_HINT,
            secondary=True,
        )
    if kind == "extra_forbidden":
        context = _context(loc[:-1])
        allowed = MODEL_KEYS.get(context, ())
        message = f"unknown key {_show(key)}" + _did_you_mean(key, allowed)
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


class _Subnets:
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
class _Checked:
    """A topology that passed the cross checks, with what they worked out: the input of
    `_build_lab`. Filled by the `_check_*` steps in order; each adds problems it finds."""

    topo: Topology
    file: str
    lines: _LineIndex
    specs: dict[str, NodeSpec]
    problems: list[_Problem] = field(default_factory=list)
    seg_names: list[str] = field(default_factory=list)
    # node -> its data interfaces as (ifname, link index, endpoint index)
    node_ifaces: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)
    bad_endpoint: bool = False
    subnets: list[ipaddress.IPv4Network | None] = field(default_factory=list)

    def problem(self, loc: Loc, message: str, hint: str = DEFAULT_HINT) -> None:
        self.problems.append(_Problem(loc, message, hint))


def _cross_check(topo: Topology, source: str | None = None) -> _Checked:
    """Checks that relate values to each other; raise the earliest problem."""
    file = topo._source or source or "<topology>"
    checked = _Checked(
        topo=topo,
        file=file,
        lines=_LineIndex(topo._yaml_root),
        specs={name: spec or NodeSpec() for name, spec in topo.nodes.items()},
    )
    for step in (
        _check_node_count,
        _check_images,
        _check_segment_names,
        _check_endpoints,
        _check_rdma_has_link,
        _check_explicit_subnets,
        _assign_pool_subnets,
        _check_segment_sizes,
    ):
        step(checked)
    if checked.problems:
        raise _first(checked.problems, file, checked.lines)
    return checked


def _check_node_count(c: _Checked) -> None:
    if len(c.specs) > MAX_NODES:
        c.problem(
            ("nodes",),
            f"too many nodes: {len(c.specs)} (at most {MAX_NODES})",
            "split the lab in two",
        )


def _check_images(c: _Checked) -> None:
    """qemu and docker nodes boot labctl's images: their name must be a known recipe
    (`up` would otherwise fail after making the lab directory). Vagrant maps image names
    to boxes in the Vagrantfile (or LABCTL_VAGRANT_BOX), so it is not checked here."""
    if c.topo.provider == "vagrant":
        return
    known = sorted(RECIPES)
    hint = f"known images: {', '.join(known)} (see `labctl image list`)"
    if c.topo.defaults.image not in RECIPES:
        image = c.topo.defaults.image
        c.problem(("defaults", "image"),
                  f"unknown image {_show(image)}" + _did_you_mean(image, known), hint)
    for name, spec in c.specs.items():
        if spec.image is not None and spec.image not in RECIPES:
            c.problem(("nodes", name, "image"),
                      f"unknown image {_show(spec.image)}" + _did_you_mean(spec.image, known),
                      hint)


def _check_segment_names(c: _Checked) -> None:
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


def _check_endpoints(c: _Checked) -> None:
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
                            f"node {_show(node)} is not defined under nodes"
                    + _did_you_mean(node, node_names),
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


def _check_rdma_has_link(c: _Checked) -> None:
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


def _check_explicit_subnets(c: _Checked) -> None:
    """Explicit subnets overlap neither each other nor the nodes' management network."""
    c.subnets = [None] * len(c.topo.links)
    seen = _Subnets()
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
            c.problem(
                ("links", i, "subnet"),
                f"{net} overlaps {c.subnets[clash]} of {c.seg_names[clash]}",
                "each segment needs a subnet of its own",
            )
        seen.add(net, i)
        c.subnets[i] = net


def _assign_pool_subnets(c: _Checked) -> None:
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
    free = _free_subnets(pool, prefix, taken)
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


def _check_segment_sizes(c: _Checked) -> None:
    for i, link in enumerate(c.topo.links):
        seg_net = c.subnets[i] if i < len(c.subnets) else None
        if seg_net is not None and len(link.endpoints) > seg_net.num_addresses - 2:
            c.problem(
                ("links", i, "endpoints"),
                f"{len(link.endpoints)} endpoints do not fit in {seg_net} "
                f"(at most {seg_net.num_addresses - 2} hosts)",
                "give the link a larger subnet, or set a shorter addressing.prefix",
            )


def _build_lab(c: _Checked, source: str | None) -> Lab:
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
        source=source if source is not None else c.file,
        nodes=tuple(nodes),
        segments=tuple(segments),
    )
