"""Problems found in a topology and how they read: pydantic's errors turned into messages
with hints, and the error that reports them all, in file order."""

from __future__ import annotations

import difflib
import heapq
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic_core import ErrorDetails

from labctl.errors import short_repr
from labctl.topology.errors import (
    DEFAULT_HINT,
    MAX_PROBLEMS_SHOWN,
    LocatedProblem,
    TopologyError,
)
from labctl.topology.locate import MAX_SHOWN, LineIndex, Loc, field_path
from labctl.topology.model import (
    ENDPOINT_RE,
    ENGINE_RE,
    IFNAME_RE,
    IMAGE_RE,
    LAB_NAME_RE,
    MAX_PREFIX,
    MODEL_KEYS,
    NODE_NAME_RE,
)


@dataclass(frozen=True)
class Problem:
    loc: Loc
    message: str
    hint: str = DEFAULT_HINT
    # A missing key is reported at its parent's line (line 1 for a top-level key), and is
    # often only the echo of a misspelled one (`Nodes:`): `meant` is the key an unknown
    # key's "did you mean" names, and a missing key some unknown key meant is not reported.
    missing: bool = False
    meant: Loc | None = None


def report(problems: Sequence[Problem], file: str,
           root: yaml.Node | LineIndex | None) -> TopologyError:
    """Every problem of a stage as one TopologyError, in file order (line, then column;
    problems at one place in the order found; unknown places last)."""
    index = root if isinstance(root, LineIndex) else LineIndex(root)
    meant = {p.meant for p in problems if p.meant is not None}
    kept = [p for p in problems if not (p.missing and p.loc in meant)]
    nowhere = (1 << 62, 0)  # after every place in a file
    # Only the problems listed are put in order and spelled out: a hostile file has
    # 100,000 of them.
    first = heapq.nsmallest(MAX_PROBLEMS_SHOWN, (
        (index.place_of(p.loc) or nowhere, i) for i, p in enumerate(kept)))
    return TopologyError.several(file, [
        LocatedProblem(None if place == nowhere else place[0], field_path(kept[i].loc),
                       kept[i].message, kept[i].hint)
        for place, i in first], more=len(kept) - len(first))


def show(value: Any) -> str:
    """A value as the user wrote it in YAML, roughly (long ones cut with an ellipsis)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return short_repr(value, MAX_SHOWN)


def kind_of(value: Any) -> str:
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return "list"
    return "scalar"


def closest(word: str, choices: Sequence[str]) -> str | None:
    """The choice `word` most likely meant: the same but for case, or a close spelling."""
    same_but_case = [c for c in choices if c.lower() == word.lower()]
    if same_but_case:
        return same_but_case[0]
    if len(word) > 2 * MAX_SHOWN:  # no key or name is that long; spare difflib the work
        return None
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    return _did_you_mean(word, closest(word, choices))


def _did_you_mean(word: str, meant: str | None) -> str:
    if meant is None:
        return ""
    if meant.lower() == word.lower():  # `Nodes:`: keys are lowercase
        return f"; did you mean {meant!r}? (keys are case-sensitive)"
    return f"; did you mean {meant!r}?"


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
    "route": "a route is a mapping like `{to: 10.77.2.0/24, via: 10.77.1.1}`",
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
    if loc[0] == "nodes" and len(loc) == 4 and loc[2] == "routes":
        return "route"
    return "?"


def _explain_pattern(pattern: str, value: str) -> tuple[str, str]:
    got = f"(got {show(value)})"
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
            return f"{show(node)} is not a valid node name {got}", hint
        if ifname == "eth0":
            return (
                f"eth0 is the management interface; data links use eth1..eth99 {got}",
                "number data interfaces from eth1",
            )
        return f"the interface must be eth1..eth99 {got}", hint
    if pattern == f"^{IFNAME_RE}$":
        return (f"must be a data interface eth1..eth99 {got}",
                "eth0 is the management interface; list data interfaces, e.g. [eth1, eth2]")
    if pattern == ENGINE_RE:
        return (f"must be local, vm:NAME, ssh://user@host[:port], unix:///path or a docker "
                f"context name {got}",
                "tcp:// engines are refused: an unauthenticated Docker API is root for "
                "anyone who reaches it (use ssh://)")
    return f"must match {pattern} {got}", DEFAULT_HINT


def problem_from_pydantic(err: ErrorDetails) -> Problem:
    loc: Loc = tuple(err["loc"])
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    key = next((str(p) for p in reversed(loc) if isinstance(p, str) and p != "[key]"), "")

    if kind == "labctl_value":  # packages, mounts: the check's own words
        return Problem(loc, str(ctx.get("message")), str(ctx.get("hint") or DEFAULT_HINT))
    if kind == "too_long":
        return Problem(loc, f"too many items (at most {ctx.get('max_length')})",
                       "split the list, or use fewer items")
    if kind == "missing":
        example = _EXAMPLES.get(key)
        return Problem(
            loc,
            "required key missing",
            f"add it, e.g. `{example}`" if example else DEFAULT_HINT,
            missing=True,
        )
    if kind == "extra_forbidden":
        context = _context(loc[:-1])
        allowed = MODEL_KEYS.get(context, ())
        suggestion = closest(key, allowed)
        message = f"unknown key {show(key)}" + _did_you_mean(key, suggestion)
        hint = f"keys allowed here: {', '.join(allowed)}" if allowed else DEFAULT_HINT
        if context == "node" and key == "mtu":
            hint = "the MTU is set per link (links[].mtu) or for all links (defaults.mtu)"
        elif context == "node" and key in ("links", "interfaces", "endpoints"):
            hint = "connect nodes under the top-level links: `- endpoints: [a:eth1, b:eth1]`"
        return Problem(loc, message, hint,
                       meant=(*loc[:-1], suggestion) if suggestion is not None else None)
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        message = f"must be one of {', '.join(choices)} (got {show(value)})"
        hint = f"use one of: {', '.join(choices)}"
        if isinstance(value, str):
            close = difflib.get_close_matches(value, choices, n=1, cutoff=0.5)
            if close:
                hint = f"did you mean {close[0]!r}? ({hint})"
        if value is False and key == "rdma":
            hint = "write `rdma: none` (YAML reads a bare no/off/false as a boolean)"
        return Problem(loc, message, hint)
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return Problem(loc, f"must be an integer (got {show(value)})", _range_hint(key))
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        if key in _RANGES:
            low, high, unit = _RANGES[key]
            message = f"must be {low}..{high}{unit} (got {value})"
        elif "ge" in ctx:
            message = f"must be at least {ctx['ge']} (got {value})"
        else:
            message = f"must be at most {ctx.get('le')} (got {value})"
        return Problem(loc, message, _range_hint(key))
    if kind == "string_type":
        if loc and loc[-1] == "[key]":
            return Problem(
                loc,
                f"names must be strings (got {show(value)})",
                "start names with a lowercase letter, e.g. node1",
            )
        if key == "endpoints":
            return Problem(
                loc,
                f"must be a string like node1:eth1 (got {show(value)})",
                'write endpoints as "node:ethN", e.g. node1:eth1',
            )
        return Problem(loc, f"must be a string (got {show(value)})")
    if kind == "string_pattern_mismatch":
        message, hint = _explain_pattern(str(ctx.get("pattern", "")), str(value))
        return Problem(loc, message, hint)
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        context = _context(loc)
        hint = _MAPPING_HINTS.get(context, DEFAULT_HINT)
        if context == "node":
            return Problem(
                loc, f"must be a mapping of node settings or empty (got {show(value)})", hint
            )
        return Problem(loc, f"must be a mapping (got {show(value)})", hint)
    if kind == "list_type":
        if key == "endpoints":
            return Problem(
                loc,
                f"must be a list like [node1:eth1, node2:eth1] (got {show(value)})",
                "separate endpoints with commas inside [ ], or write one `- node:ethN` per line",
            )
        if key in ("packages", "mounts"):
            example = ("packages: [gdb, strace]" if key == "packages"
                       else "mounts: [./src:/work]")
            return Problem(loc, f"must be a list (got {show(value)})",
                           f"write {key} as a list, e.g. `{example}`")
        if key == "routes":
            return Problem(loc, f"must be a list (got {show(value)})",
                           "write routes as a list: `routes: [{to: 10.77.2.0/24, via: "
                           "10.77.1.1}]`")
        return Problem(
            loc,
            f"must be a list (got {show(value)})",
            "write links as a list: `links:` then `- endpoints: [node1:eth1, node2:eth1]`",
        )
    if kind == "too_short":
        if key == "nodes":
            return Problem(loc, "at least one node is required", f"e.g. `{_EXAMPLES['nodes']}`")
        got = len(value) if isinstance(value, list | tuple | dict | str) else "?"
        return Problem(
            loc,
            f"a link needs at least 2 endpoints (got {got})",
            "list both ends of the link, e.g. `endpoints: [node1:eth1, node2:eth1]`",
        )
    if kind in ("bool_type", "bool_parsing"):
        return Problem(loc, f"must be true or false (got {show(value)})",
                       f"write `{key}: true` or leave it out")
    if kind == "ipv4_address":
        return Problem(loc, err["msg"], "write the gateway as an IPv4 address, e.g. 10.77.1.1")
    if kind in ("ipv4_network", "ipv4_private", "ipv4_prefix"):
        return Problem(
            loc,
            err["msg"],
            "write a private network in CIDR form, e.g. 10.77.0.0/16 or 192.168.50.0/24",
        )
    # Anything else pydantic may say (recursive aliases, odd YAML types...).
    msg = err["msg"]
    return Problem(loc, (msg[:1].lower() + msg[1:]) + f" (got {show(value)})")


def _range_hint(key: str) -> str:
    if key in _RANGES:
        low, high, unit = _RANGES[key]
        return f"{key} takes a whole number from {low} to {high}{unit}"
    return DEFAULT_HINT
