"""What differs between two resolved labs: the lab that is up (its lab.json) and the lab a
topology file gives now. `labctl up` on a lab that is up uses it: the same lab is left as
it is, a changed one is listed so the user can decide to `--recreate` it.

Every line names what changed and how, in a user's words (node, link, interface). The
source path is not compared: one topology file can be named in several ways.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from labctl.errors import short_repr
from labctl.topology.resolved import Interface, Lab, Mount, Node, Route, Segment

T = TypeVar("T")
MOUNT_SHOWN = 160  # characters of a mount: a path cut at 60 hides which folder it is

# Order artefacts: a node's or a link's index changes with the file's order, and what it
# derives (MACs, a segment's place) is compared where it shows.
_NODE_SKIPPED = {"name", "index", "interfaces"}
_SEGMENT_SKIPPED = {"name", "index"}
# How the nodes were started (restored or cold): the same lab either way.
_HOW_BOOTED = {"boot"}
_INTERFACE_SKIPPED = {"name", "segment"}


def lab_changes(old: Lab, new: Lab) -> list[str]:
    """One line per difference, in a stable order; empty when the labs are the same."""
    changes: list[str] = []
    if old.provider != new.provider:
        changes.append(f"provider: {old.provider} → {new.provider}")
    for key in sorted((set(old.provider_options) | set(new.provider_options)) - _HOW_BOOTED):
        was, now = old.provider_options.get(key), new.provider_options.get(key)
        if was != now:
            changes.append(f"provider option {key}: {_shown(was)} → {_shown(now)}")
    changes += _named(
        "node", {n.name: n for n in old.nodes}, {n.name: n for n in new.nodes},
        lambda a, b: _node_changes(a, b, old, new))
    changes += _named(
        "link", {s.name: s for s in old.segments}, {s.name: s for s in new.segments},
        _segment_changes)
    return changes


def _named(kind: str, old: Mapping[str, T], new: Mapping[str, T],
           compare: Callable[[T, T], list[str]]) -> list[str]:
    """Removed, then added, then changed items of one kind, each by name."""
    lines = [f"{kind} {name} removed" for name in old if name not in new]
    lines += [f"{kind} {name} added" for name in new if name not in old]
    for name in old:
        if name in new:
            lines += [f"{kind} {name}: {line}" for line in compare(old[name], new[name])]
    return lines


def _field_changes(old: Any, new: Any, skipped: set[str]) -> list[str]:
    """`field: was → now` for each dataclass field that differs."""
    return [f"{f.name} {_shown(getattr(old, f.name))} → {_shown(getattr(new, f.name))}"
            for f in dataclasses.fields(old)
            if f.name not in skipped and getattr(old, f.name) != getattr(new, f.name)]


def _node_changes(old: Node, new: Node, old_lab: Lab, new_lab: Lab) -> list[str]:
    lines = _field_changes(old, new, _NODE_SKIPPED)
    lines += _named(
        "interface", {i.name: i for i in old.interfaces}, {i.name: i for i in new.interfaces},
        lambda a, b: _interface_changes(a, b, old_lab, new_lab))
    return lines


def _interface_changes(old: Interface, new: Interface, old_lab: Lab,
                       new_lab: Lab) -> list[str]:
    lines = _field_changes(old, new, _INTERFACE_SKIPPED)
    was, now = _segment_name(old_lab, old.segment), _segment_name(new_lab, new.segment)
    if was != now:
        lines.append(f"link {was} → {now}")
    return lines


def _segment_name(lab: Lab, index: int) -> str:
    return next((s.name for s in lab.segments if s.index == index), f"#{index}")


def _segment_changes(old: Segment, new: Segment) -> list[str]:
    return _field_changes(old, new, _SEGMENT_SKIPPED)


def _shown(value: object) -> str:
    """A value as a user wrote it; strings (paths among them) through short_repr."""
    if value is None:
        return "none"
    if isinstance(value, Mount):
        return short_repr(value.text, MOUNT_SHOWN)
    if isinstance(value, Route):
        return f"{value.to} via {value.via}"
    if isinstance(value, tuple):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    if isinstance(value, bool | int | float):
        return str(value)
    return short_repr(value)
