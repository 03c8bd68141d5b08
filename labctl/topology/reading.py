"""Reading a topology file, bounded: the bytes (regular files, at most 1 MiB), UTF-8 text,
then the composed YAML document (positions kept, nesting depth and alias expansion bounded,
duplicate keys refused)."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from labctl.bounded import MAX_NUMBER_CHARS, read_at_most
from labctl.topology.errors import LocatedProblem, TopologyError
from labctl.topology.locate import Loc, field_path

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
            data = read_at_most(fd, MAX_FILE_BYTES)
        finally:
            os.close(fd)
    except OSError as exc:
        raise refuse(f"cannot read the topology file: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:  # it grew while being read
        raise _too_big(file, len(data))
    return data


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


def decode_utf8(raw: bytes, file: str) -> str:
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

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        _refuse_long_number(node)
        return int(super().construct_yaml_int(node))

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        _refuse_long_number(node)
        return float(super().construct_yaml_float(node))

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooDeep(self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _refuse_long_number(node: yaml.ScalarNode) -> None:
    """A number of 5,000 digits is Python's int-length ValueError (no line, a traceback):
    no topology value is longer than bounded.MAX_NUMBER_CHARS."""
    if len(node.value) > MAX_NUMBER_CHARS:
        raise yaml.constructor.ConstructorError(
            None, None, f"a number of {len(node.value)} characters (at most "
            f"{MAX_NUMBER_CHARS})", node.start_mark)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)
_BoundedLoader.add_constructor("tag:yaml.org,2002:float", _BoundedLoader.construct_yaml_float)


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


# --------------------------------------------------------------------------- what is quoted
# labctl runs as root, and a topology file comes from elsewhere: `validate` on a link to
# /etc/shadow (or a key, a token file) must not print what it holds, a line at a time
# through its error messages. The rule: nothing from a file is quoted in an error until the
# file looks like a topology, a YAML mapping with a top-level `nodes` key or two of the
# topology's top-level keys (any case: `Nodes` is a typo to point out). No system file is
# YAML with such keys. Before that, an error names the file, the line and the kind of
# problem only: a mapping that does not look like a topology is refused as missing
# `nodes`, without naming its keys, and the YAML parser's messages (given before there is
# a mapping to look at) keep what they quote only when the text has such keys at the start
# of its lines, else only a single character (a tab) or a token name (<block end>).
TOPOLOGY_KEYS = frozenset({"name", "provider", "defaults", "addressing", "nodes", "links",
                           "hosts"})


def _looks_like_topology(keys: list[str]) -> bool:
    found = {k.lower() for k in keys} & TOPOLOGY_KEYS
    return "nodes" in found or len(found) >= 2


_LINE_KEY = re.compile(r"^[\"']?([A-Za-z]+)[\"']?[ \t]*:", re.MULTILINE)


def _text_looks_like_topology(text: str) -> bool:
    return _looks_like_topology(_LINE_KEY.findall(text[:MAX_FILE_BYTES]))


def _refuse_unless_topology(root: yaml.Node, file: str) -> None:
    """Refuse a YAML mapping that does not look like a topology, quoting nothing of it."""
    if not isinstance(root, yaml.MappingNode):
        return  # not a mapping: refused later as such, with nothing quoted
    keys = [k.value for k, _ in root.value if isinstance(k, yaml.ScalarNode)]
    if _looks_like_topology([k for k in keys if isinstance(k, str)]):
        return
    raise TopologyError(
        file, root.start_mark.line + 1, "nodes",
        "required key missing, and this file does not look like a topology (none of its "
        "content is shown)",
        hint="check the path; a topology names its nodes under `nodes:` (see "
        "topologies/two-node.yaml)",
    )


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def _without_quotes(problem: str) -> str:
    """A YAML parser message with what it quotes from the file cut out, but a single
    character (a tab, a '@' that cannot start a token) or a token name."""

    def keep_short(match: re.Match[str]) -> str:
        inner = match.group()[1:-1]
        harmless = (len(inner) == 1 or re.fullmatch(r"\\\w\w{0,4}", inner)
                    or re.fullmatch(r"<[a-z ]+>", inner))
        return match.group() if harmless else "(…)"

    return _QUOTED.sub(keep_short, problem)


def read_yaml(text: str, file: str) -> tuple[yaml.Node | None, Any]:
    """Compose the document (positions kept), refuse duplicate keys, then construct it."""
    loader: yaml.SafeLoader | None = None
    try:
        loader = _BoundedLoader(text)
        root = loader.get_single_node()
        if root is not None:
            _refuse_unless_topology(root, file)
            if _expanded_size(root) > MAX_YAML_NODES:
                raise TopologyError(
                    file, root.start_mark.line + 1, "",
                    f"the document expands to more than {MAX_YAML_NODES} YAML nodes "
                    "(through aliases)",
                    hint="write the topology without nested aliases (*name)",
                )
            # Every duplicate key, and nothing after them: which of two values the file
            # means is unclear, and checking the one YAML keeps could report the wrong one.
            duplicates = _duplicate_keys(root)
            if duplicates:
                raise TopologyError.several(file, [d.problem() for d in duplicates])
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "cannot parse"
        if exc.context and exc.problem:
            problem = f"{problem} ({exc.context})"
        if not _text_looks_like_topology(text):
            problem = _without_quotes(problem)
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
    column: int

    def problem(self) -> LocatedProblem:
        key = self.loc[-1]
        return LocatedProblem(
            self.line,
            field_path(self.loc),
            f"duplicate key {key!r} (first at line {self.first_line})",
            "YAML would keep only the last one: rename one of them or merge them",
        )


def _duplicate_keys(root: yaml.Node) -> list[_Duplicate]:
    """Every repeated key of every mapping, in file order."""
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
                        found.append(_Duplicate((*loc, key.value), line, first[key.value],
                                                key.start_mark.column))
                    else:
                        first[key.value] = line
                    walk(value, (*loc, key.value))
                else:
                    walk(value, loc)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*loc, i))

    walk(root, ())
    return sorted(found, key=lambda d: (d.line, d.column))
