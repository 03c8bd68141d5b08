"""Where things are in a topology file: key paths (`links[0].endpoints[1]`) and their lines."""

from __future__ import annotations

import re

import yaml

from labctl.errors import short_repr

Loc = tuple[str | int, ...]

MAX_SHOWN = 60  # characters of a user's value echoed in a message


def field_path(loc: Loc) -> str:
    """`nodes.node1.rdma`, `links[0].endpoints[1]`, `nodes['my node']`: path of a key."""
    out = ""
    for k, part in enumerate(loc):
        if part == "[key]":
            continue
        is_key = k + 1 < len(loc) and loc[k + 1] == "[key]"  # a mapping key, maybe an int
        if isinstance(part, int) and not is_key:
            out += f"[{part}]"
        elif len(str(part)) > MAX_SHOWN or not re.fullmatch(r"[A-Za-z0-9_-]+", str(part)):
            # odd (or very long) keys: quoted, cut
            out += f"[{short_repr(str(part))}]"
        else:
            out += f".{part}" if out else str(part)
    return out


class LineIndex:
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
        place = self.place_of(loc)
        return None if place is None else place[0]

    def place_of(self, loc: Loc) -> tuple[int, int] | None:
        """(line, column) of the key at `loc`, or of the closest parent found in the file:
        the order of problems in the file (several on one line of a flow mapping)."""
        if self.root is None:
            return None
        node = self.root
        mark = node.start_mark
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                match = self._mapping(node).get(str(part))
                if match is None:
                    break
                mark = match[0].start_mark
                node = match[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
                if not 0 <= part < len(node.value):
                    break
                node = node.value[part]
                mark = node.start_mark
            else:
                break
        return mark.line + 1, mark.column
