"""Topology files: read (YAML), validate (model + cross checks), resolve (augment) to a Lab.

Stages, each usable on its own:

- `load_topology(path)`: YAML text -> composed node tree (positions kept, duplicate keys
  refused) -> `Topology` model -> cross checks. Returns the validated `Topology`.
- `resolve(topo, source)`: defaults applied, subnets, addresses and MACs assigned -> `Lab`.
- `load_lab(path)`: both.

Every failure is one `TopologyError` naming the file, and for each problem the line and the
field: every problem of the stage that found them, in file order. The stages run in
order and the first that finds problems ends the load, as the later ones need what it
checks: reading (the file, UTF-8, YAML syntax: the parser stops at its first error),
duplicate keys (all of them; the file's meaning is unclear until they are gone), the
model (every key's value on its own, all problems pydantic finds), then the cross checks
(`checks`: endpoints naming nodes, subnets, routes, hosts..., all their problems).

The steps live in their own modules: `reading` (bounded file and YAML reading), `locate`
(key paths and lines), `problems` (messages and hints), `checks` (cross checks, resolution).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from labctl.topology.checks import Checked, build_lab, cross_check
from labctl.topology.errors import TopologyError
from labctl.topology.host import HostFacts
from labctl.topology.locate import LineIndex
from labctl.topology.model import LAB_NAME_RE, Topology
from labctl.topology.problems import kind_of, problem_from_pydantic, report, show
from labctl.topology.reading import decode_utf8, read_topology_bytes, read_yaml
from labctl.topology.resolved import Lab

__all__ = [
    "TopologyError",
    "json_schema",
    "load_lab",
    "load_topology",
    "read_lab_name",
    "read_topology_bytes",
    "resolve",
    "schema_text",
]


# --------------------------------------------------------------------------- public API


def load_topology(path: str | Path, *, allowances: tuple[Path, ...] = (),
                  host: HostFacts | None = None) -> Topology:
    """Read and validate a topology file; raise `TopologyError` with its problems.
    `allowances` and `host`: see `checks.cross_check`."""
    return _load(path, allowances, host)[0]


def parse_topology(text: str | bytes, file: str = "<topology>") -> Topology:
    """Validate a topology given as YAML text; `file` is only used in messages."""
    return _parse(text, file)[0]


def resolve(topo: Topology, source: str) -> Lab:
    """Apply defaults and assign subnets, addresses and MACs: the Lab providers build.

    `source` is recorded in the Lab (the topology file's path). Raises `TopologyError`
    when the topology is inconsistent (with line numbers if it came from a file).
    """
    return build_lab(cross_check(topo, source), source)


def load_lab(path: str | Path, *, allowances: tuple[Path, ...] = (),
             host: HostFacts | None = None) -> Lab:
    """`load_topology` then `resolve`: a topology file to its Lab (checked and resolved once)."""
    _, checked = _load(path, allowances, host)
    return build_lab(checked, str(path))


def read_lab_name(path: str | Path) -> str:
    """Only the `name` of a topology file (for `down`): the rest may be broken.

    The file is read with the same bounds as `load_topology`; a missing or invalid name
    is a `TopologyError`."""
    file = str(path)
    root, data = read_yaml(decode_utf8(read_topology_bytes(path), file), file)
    name = data.get("name") if isinstance(data, dict) else None
    line = LineIndex(root).line_of(("name",))
    if not isinstance(name, str) or not re.fullmatch(LAB_NAME_RE, name):
        got = "no name" if name is None else f"name {show(name)}"
        raise TopologyError(file, line, "name", f"cannot tell the lab from this file ({got})",
                            hint="use --lab NAME")
    return name


def _load(path: str | Path, allowances: tuple[Path, ...] = (),
          host: HostFacts | None = None) -> tuple[Topology, Checked]:
    return _parse(read_topology_bytes(path), str(path), allowances, host)


def _parse(text: str | bytes, file: str, allowances: tuple[Path, ...] = (),
           host: HostFacts | None = None) -> tuple[Topology, Checked]:
    if isinstance(text, bytes):
        text = decode_utf8(text, file)
    root, data = read_yaml(text, file)
    if not isinstance(data, dict):
        line = 1 if root is None else root.start_mark.line + 1
        got = "empty" if data is None else f"a YAML {kind_of(data)}"
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
        problems = [problem_from_pydantic(err) for err in exc.errors()]
        raise report(problems, file, root) from None
    topo._yaml_root = root
    topo._source = file
    return topo, cross_check(topo, allowances=allowances, host=host)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of topology files (for editors: yaml-language-server, VS Code...)."""
    return Topology.model_json_schema()


def schema_text() -> str:
    """`json_schema()` as the text of topologies/schema.json."""
    return json.dumps(json_schema(), indent=2) + "\n"
