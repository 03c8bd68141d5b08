"""Bad topology files: one clear TopologyError each, naming file, line and field of each
problem.

- tests/unit/topology/bad/*.yaml: hand-written cases; the sidecar *.expected holds the
  exact message and hint as `labctl validate` prints them after `error: `: one problem is
  a line and a `hint:` line; several are a count, a line each and a `hint:` line per
  distinct hint.
- Hypothesis mutates valid documents (wrong types, unknown keys, bad names, bad addresses,
  dangling endpoints, duplicate keys...) and checks each gives a TopologyError with the
  line and the field, never another exception; random documents and text are never
  anything worse than a TopologyError.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import re
import string
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from labctl.topology.errors import TopologyError
from labctl.topology.load import load_lab, load_topology, parse_topology, resolve
from labctl.topology.model import (
    LAB_NAME_RE,
    MODEL_KEYS,
    NODE_NAME_RE,
    PRIVATE_NETWORKS,
)
from labctl.topology.resolved import Lab

HERE = Path(__file__).parent
DATA = HERE / "topology"
BAD = sorted((DATA / "bad").glob("*.yaml"))
GOOD = sorted((DATA / "input").glob("*.yaml")) + sorted(
    (HERE.parent.parent / "topologies").glob("*.yaml")
)


def _load(text: str, file: str = "t.yaml") -> Lab:
    return resolve(parse_topology(text, file), file)


def _problem_lines(err: TopologyError) -> list[str]:
    """The `file:line: field: message` lines of an error's message, one per problem."""
    lines = err.message.splitlines()
    if len(lines) == 1:
        return lines
    return [line.removeprefix("  ") for line in lines[1:] if not line.startswith("  ... and ")]


def _error(text: str) -> TopologyError:
    with pytest.raises(TopologyError) as info:
        _load(text)
    return info.value


# --------------------------------------------------------------------------- hand-written


def test_bad_corpus_is_large_enough() -> None:
    assert len(BAD) >= 50
    assert {p.stem for p in BAD} == {p.stem for p in (DATA / "bad").glob("*.expected")}


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_file(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(DATA)
    expected = path.with_suffix(".expected").read_text()
    with pytest.raises(TopologyError) as info:
        load_lab(Path("bad") / path.name)
    err = info.value
    assert f"{err.message}\nhint: {err.hint}\n" == expected
    assert err.exit_code == 2
    assert err.line is not None
    first = err.problems[0]
    assert (first.line, first.field, first.message) == (err.line, err.field, err.reason)
    if len(err.problems) == 1:
        assert err.message.startswith(f"bad/{path.name}:{err.line}: ")
    else:
        assert err.message.splitlines()[1].startswith(f"  bad/{path.name}:{err.line}: ")
    # load_topology alone finds the same problems (nothing waits for resolve).
    with pytest.raises(TopologyError) as again:
        load_topology(Path("bad") / path.name)
    assert again.value.message == err.message


def test_unknown_key_suggestion() -> None:
    err = _error("name: t\nnodes:\n  a: {rdma: rxe, memroy: 1024}\n")
    assert err.message == "t.yaml:3: nodes.a.memroy: unknown key 'memroy'; did you mean 'memory'?"
    assert err.hint == ("keys allowed here: rdma, memory, cpus, image, packages, mounts, "
                        "kernel, router, routes, rdma_interfaces, host")


def test_first_error_by_line_wins() -> None:
    # Both are model errors: the earlier line wins whatever the order of checks.
    err = _error("name: t\nnodes:\n  a: {cpus: 0}\ndefaults:\n  memory: 1\n")
    assert (err.line, err.field) == (3, "nodes.a.cpus")
    err = _error("nodes:\n  a: {cpus: 0}\nname: T\n")
    assert (err.line, err.field) == (2, "nodes.a.cpus")


def test_missing_key_points_at_parent() -> None:
    err = _error("# header\n\nname: t\nnodes: {a: {}, b: {}}\nlinks:\n  - name: x\n    mtu: 1500\n")
    assert (err.line, err.field, err.reason) == (6, "links[0].endpoints", "required key missing")
    err = _error("# header\n\nnodes: {a: {}}\n")
    assert (err.line, err.field) == (3, "name")


def test_duplicate_key_in_sequence_item_and_aliases() -> None:
    err = _error(
        "name: t\nnodes: {a: {}, b: {}}\nlinks:\n  - endpoints: [a:eth1, b:eth1]\n"
        "    name: x\n    name: y\n"
    )
    assert err.message == "t.yaml:6: links[0].name: duplicate key 'name' (first at line 5)"
    # Merge keys are not duplicates; a recursive alias is refused cleanly.
    _load("name: t\ndefaults: {rdma: none}\nnodes:\n  a: &x {cpus: 2}\n  b: {<<: *x, cpus: 3}\n")
    err = _error("name: t\nnodes: &n\n  a: *n\n")
    assert err.line is not None


def test_unreadable_and_non_utf8_files(tmp_path: Path) -> None:
    with pytest.raises(TopologyError) as info:
        load_lab(tmp_path / "missing.yaml")
    assert info.value.message.startswith(f"{tmp_path / 'missing.yaml'}: cannot read")
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: t\nnodes:\n  caf\xe9: {}\n")
    with pytest.raises(TopologyError) as info:
        load_lab(path)
    assert info.value.message == f"{path}:3: the file is not UTF-8 text"


def test_control_character() -> None:
    err = _error("name: t\nnodes:\n  a: {}\x07\n")
    assert err.line == 3
    assert "invalid YAML" in err.reason


def test_rdma_none_from_yaml_boolean_hint() -> None:
    err = _error("name: t\nnodes:\n  a: {rdma: off}\n")
    assert err.reason == "must be one of rxe, siw, none (got false)"
    assert err.hint is not None and "rdma: none" in err.hint


def test_dangling_endpoint_reported_not_the_orphan_node() -> None:
    err = _error("name: t\nnodes:\n  a: {}\n  b: {}\nlinks:\n  - endpoints: [a:eth1, bb:eth1]\n")
    assert err.message == (
        "t.yaml:6: links[0].endpoints[1]: node 'bb' is not defined under nodes; did you mean 'b'?"
    )


# --------------------------------------------------------------------------- hypothesis

BASES: list[dict[str, Any]] = [yaml.safe_load(p.read_text()) for p in GOOD]
# Break the sharing that YAML aliases create, so one mutation changes one place.
BASES = [json.loads(json.dumps(doc)) for doc in BASES]

INT_FIELDS = {"memory": (128, 65536), "cpus": (1, 64), "mtu": (576, 9000), "prefix": (1, 30)}

not_int = st.one_of(
    st.text(max_size=8),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f != int(f)),
    st.floats(min_value=1, max_value=1e6).map(lambda f: float(int(f))),  # 512.0
    st.lists(st.integers(), max_size=2),
    st.dictionaries(
        st.text(string.ascii_lowercase, min_size=1, max_size=3), st.integers(), max_size=2
    ),
)
not_str = st.one_of(
    st.integers(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(
        st.text(string.ascii_lowercase, min_size=1, max_size=3),
        st.integers(),
        min_size=1,
        max_size=2,
    ),
)
not_mapping = st.one_of(
    st.integers(), st.booleans(), st.text(max_size=8), st.lists(st.integers(), max_size=2)
)
not_list = st.one_of(
    st.integers(),
    st.booleans(),
    st.text(max_size=8),
    st.dictionaries(
        st.text(string.ascii_lowercase, min_size=1, max_size=3), st.integers(), max_size=2
    ),
)
keyword = st.text(string.ascii_lowercase + string.digits + "_-", min_size=1, max_size=12)
valid_node_name = st.from_regex(NODE_NAME_RE, fullmatch=True)
# PyYAML's dumper folds line breaks inside quoted keys: keep them out of generated names.
bad_name_text = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\r\n\x85\u2028\u2029"),
    max_size=25,
).filter(lambda s: s != "<<")


def _private(net: ipaddress.IPv4Network) -> bool:
    return any(net.subnet_of(p) for p in PRIVATE_NETWORKS)


@st.composite
def bad_network(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["text", "public", "host-bits", "long-prefix", "octet"]))
    if kind == "text":
        return draw(st.text(max_size=15).filter(lambda s: "/" not in s))
    if kind == "public":
        net = ipaddress.IPv4Network(
            (draw(st.integers(0, 2**32 - 1)), draw(st.integers(1, 30))), strict=False
        )
        if _private(net):
            return "8.8.8.0/24"
        return str(net)
    if kind == "host-bits":
        plen = draw(st.integers(8, 30))
        net = ipaddress.IPv4Network((0x0A000000 + draw(st.integers(0, 2**24 - 1)), plen), False)
        host = draw(st.integers(1, net.num_addresses - 1))
        return f"{net.network_address + host}/{plen}"
    if kind == "long-prefix":
        return f"10.{draw(st.integers(0, 255))}.0.0/{draw(st.sampled_from([31, 32]))}"
    return f"10.{draw(st.integers(256, 999))}.0.0/16"


def _node_mapping(doc: dict[str, Any], name: str) -> dict[str, Any]:
    if doc["nodes"][name] is None:
        doc["nodes"][name] = {}
    node: dict[str, Any] = doc["nodes"][name]
    return node


def _field(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not re.fullmatch(r"[A-Za-z0-9_-]+", part):
            out += f"[{part!r}]"
        else:
            out += f".{part}" if out else part
    return out


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, str | None]:
    """A valid document with one thing broken: (YAML text, expected field or None=any)."""
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    nodes = list(doc["nodes"])
    links = doc.get("links", [])
    kinds = [
        "unknown-key",
        "wrong-type",
        "out-of-range",
        "bad-lab-name",
        "bad-node-name",
        "remove-required",
        "rdma-without-link",
        "bad-network",
        "prefix-not-longer",
        "duplicate-key",
        "bad-image",
    ]
    if links:
        kinds += ["bad-ifname", "dangling", "reuse-interface", "short-link", "bad-link-name"]
    if len(links) >= 2:
        kinds += ["overlap"]
    kind = draw(st.sampled_from(kinds))
    path: tuple[str | int, ...]

    if kind == "unknown-key":
        where = draw(
            st.sampled_from(
                [(), ("defaults",), ("addressing",)]
                + [("nodes", n) for n in nodes]
                + [("links", i) for i in range(len(links))]
            )
        )
        if where == ():
            target, allowed = doc, MODEL_KEYS["topology"]
        elif where[0] == "nodes":
            target, allowed = _node_mapping(doc, str(where[1])), MODEL_KEYS["node"]
        elif where[0] == "links":
            target, allowed = links[int(where[1])], MODEL_KEYS["link"]
        else:
            target, allowed = doc.setdefault(str(where[0]), {}), MODEL_KEYS[str(where[0])]
        key = draw(keyword.filter(lambda k: k not in allowed))
        target[key] = draw(st.integers() | st.text(max_size=5))
        path = (*where, key)
    elif kind == "wrong-type":
        choices: list[tuple[tuple[str | int, ...], Any]] = [
            (("name",), not_str),
            (("provider",), not_str),
            (("defaults",), not_mapping),
            (("addressing",), not_mapping),
            (("nodes",), not_mapping),
            (("links",), not_list),
            (("defaults", "rdma"), not_str),
            (("defaults", "image"), not_str),
            (("addressing", "pool"), not_str),
        ] + [
            ((s, f), not_int)
            for s, f in [
                ("defaults", "memory"),
                ("defaults", "cpus"),
                ("defaults", "mtu"),
                ("addressing", "prefix"),
            ]
        ]
        for n in nodes:
            choices += [(("nodes", n), st.integers() | st.booleans() | st.lists(st.integers()))]
            choices += [(("nodes", n, f), not_int) for f in ("memory", "cpus")]
            choices += [(("nodes", n, f), not_str) for f in ("rdma", "image")]
        for i in range(len(links)):
            choices += [
                (("links", i), not_mapping),
                (("links", i, "endpoints"), not_list),
                (("links", i, "endpoints", 0), not_str),
                (("links", i, "mtu"), not_int),
                (("links", i, "name"), not_str),
                (("links", i, "subnet"), not_str),
            ]
        path, values = draw(st.sampled_from(choices))
        _set(doc, path, draw(values))
    elif kind == "out-of-range":
        places: list[tuple[str | int, ...]] = [("defaults", f) for f in ("memory", "cpus", "mtu")]
        places += [("addressing", "prefix")]
        places += [("nodes", n, f) for n in nodes for f in ("memory", "cpus")]
        places += [("links", i, "mtu") for i in range(len(links))]
        path = draw(st.sampled_from(places))
        low, high = INT_FIELDS[str(path[-1])]
        _set(doc, path, draw(st.integers(max_value=low - 1) | st.integers(min_value=high + 1)))
    elif kind == "bad-lab-name":
        doc["name"] = draw(bad_name_text.filter(lambda s: not re.fullmatch(LAB_NAME_RE, s)))
        path = ("name",)
    elif kind == "bad-node-name":
        old = draw(st.sampled_from(nodes))
        new = draw(bad_name_text.filter(lambda s: not re.fullmatch(NODE_NAME_RE, s)))
        doc["nodes"] = {new if k == old else k: v for k, v in doc["nodes"].items()}
        path = ("nodes", new)
    elif kind == "bad-image":
        where = draw(st.sampled_from([("defaults",)] + [("nodes", n) for n in nodes]))
        path = (*where, "image")
        _set(
            doc,
            path,
            draw(
                st.text(max_size=10).filter(lambda s: not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", s))
            ),
        )
    elif kind == "remove-required":
        places = [("name",), ("nodes",)]
        places += [("links", i, "endpoints") for i in range(len(links))]
        path = draw(st.sampled_from(places))
        parent = _get(doc, path[:-1])
        del parent[path[-1]]
    elif kind == "rdma-without-link":
        new = draw(valid_node_name.filter(lambda s: s not in nodes))
        doc["nodes"][new] = {"rdma": draw(st.sampled_from(["rxe", "siw"]))}
        path = ("nodes", new, "rdma")
    elif kind == "bad-network":
        places = [("addressing", "pool")]
        places += [("links", i, "subnet") for i in range(len(links))]
        path = draw(st.sampled_from(places))
        _set(doc, path, draw(bad_network()))
    elif kind == "prefix-not-longer":
        plen = draw(st.integers(8, 24))
        doc["addressing"] = {"pool": f"10.0.0.0/{plen}", "prefix": draw(st.integers(1, plen))}
        path = ("addressing", "prefix")
    elif kind == "duplicate-key":
        text = yaml.safe_dump(doc, sort_keys=False)
        key = draw(st.sampled_from([k for k in doc if isinstance(k, str)]))
        return text + f"{key}: again\n", key
    elif kind == "bad-ifname":
        i = draw(st.integers(0, len(links) - 1))
        j = draw(st.integers(0, len(links[i]["endpoints"]) - 1))
        node = links[i]["endpoints"][j].split(":")[0]
        ifname = draw(
            st.just("eth0")
            | st.text(max_size=8).filter(lambda s: not re.fullmatch(r"eth[1-9][0-9]?", s))
        )
        links[i]["endpoints"][j] = f"{node}:{ifname}"
        path = ("links", i, "endpoints", j)
    elif kind == "dangling":
        i = draw(st.integers(0, len(links) - 1))
        j = draw(st.integers(0, len(links[i]["endpoints"]) - 1))
        ifname = links[i]["endpoints"][j].split(":")[1]
        node = draw(valid_node_name.filter(lambda s: s not in nodes))
        links[i]["endpoints"][j] = f"{node}:{ifname}"
        path = ("links", i, "endpoints", j)
    elif kind == "reuse-interface":
        i = draw(st.integers(0, len(links) - 1))
        k = draw(st.integers(0, len(links) - 1))
        links[k]["endpoints"].append(draw(st.sampled_from(links[i]["endpoints"])))
        return yaml.safe_dump(doc, sort_keys=False), None  # flagged on the later use
    elif kind == "short-link":
        i = draw(st.integers(0, len(links) - 1))
        links[i]["endpoints"] = links[i]["endpoints"][: draw(st.integers(0, 1))]
        path = ("links", i, "endpoints")
    elif kind == "bad-link-name":
        i = draw(st.integers(0, len(links) - 1))
        links[i]["name"] = draw(bad_name_text.filter(lambda s: not re.fullmatch(NODE_NAME_RE, s)))
        path = ("links", i, "name")
    elif kind == "overlap":
        i, k = sorted(
            draw(st.lists(st.integers(0, len(links) - 1), min_size=2, max_size=2, unique=True))
        )
        links[i]["subnet"] = "192.168.0.0/16"
        links[k]["subnet"] = f"192.168.{draw(st.integers(0, 255))}.0/24"
        path = ("links", k, "subnet")
    else:  # pragma: no cover
        raise AssertionError(kind)
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), _field(path)


def _get(doc: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _set(doc: dict[str, Any], path: tuple[str | int, ...], value: Any) -> None:
    parent: Any = doc
    for depth, part in enumerate(path[:-1]):
        if isinstance(parent, dict) and parent.get(part) is None:
            parent[part] = {}
        parent = parent[part]
        if path[0] == "nodes" and depth == 1 and parent is None:  # pragma: no cover
            raise AssertionError
    parent[path[-1]] = value


MUTATIONS = int(__import__("os").environ.get("TOPO_MUTATIONS", "400"))


@settings(max_examples=MUTATIONS, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_documents_give_one_located_error(case: tuple[str, str | None]) -> None:
    text, field = case
    with pytest.raises(TopologyError) as info:
        _load(text, "m.yaml")
    err = info.value
    for problem in err.problems:
        assert problem.line is not None and 1 <= problem.line <= text.count("\n") + 1, err.message
        assert problem.field, err.message
    assert [p.text("m.yaml") for p in err.problems] == _problem_lines(err)
    # One mutation is most often one problem; a few break two places (a subnet overlapping
    # two others): the mutated field is always among them.
    if field is not None:
        assert field in [p.field for p in err.problems], err.message
    if len(err.problems) == 1:
        assert err.message == f"m.yaml:{err.line}: {err.field}: {err.reason}"
    assert err.hint
    assert err.exit_code == 2


# --- several problems at once: each is reported ------------------------------------------
# Problems on different fields that do not depend on each other, injected together into a
# good file: every one is reported, and nothing else. Values on their own (the model) are
# checked before the cross checks, so when any value is wrong only those are reported.
UNKNOWN_IMAGES = ("trixy", "bookwurm", "nosuch-image")
OUT_OF_RANGE = {"memory": (64, 70000), "cpus": (0, 65), "mtu": (100, 9001), "prefix": (0, 31)}


def _inject_values(draw: st.DrawFn, doc: dict[str, Any]) -> dict[tuple[str | int, ...], Any]:
    """Values each wrong on its own (model problems), by the path they go to."""
    nodes, links = list(doc["nodes"]), doc.get("links", [])
    places: list[tuple[str | int, ...]] = [("name",), ("defaults", "rdma"), ("unknown-top",)]
    places += [("defaults", f) for f in ("memory", "cpus", "mtu")] + [("addressing", "prefix")]
    for n in nodes:
        places += [("nodes", n, f) for f in ("memory", "cpus", "rdma", "unknown")]
    for i in range(len(links)):
        places += [("links", i, f) for f in ("mtu", "name", "unknown")]
    chosen = draw(st.lists(st.sampled_from(places), unique=True, max_size=6))
    values: dict[tuple[str | int, ...], Any] = {}
    for place in chosen:
        last = place[-1]
        if last in ("unknown", "unknown-top"):
            model = {"unknown-top": "topology", "nodes": "node", "links": "link"}
            allowed = MODEL_KEYS[model["unknown-top" if len(place) == 1 else str(place[0])]]
            key = draw(keyword.filter(lambda k, allowed=allowed: k not in allowed))
            values[(*place[:-1], key)] = draw(st.integers(0, 9))
        elif last == "name" and len(place) == 1:
            values[place] = draw(bad_name_text.filter(lambda t: not re.fullmatch(LAB_NAME_RE, t)))
        elif last == "name":
            values[place] = draw(bad_name_text.filter(lambda t: not re.fullmatch(NODE_NAME_RE, t)))
        elif last == "rdma":
            values[place] = draw(st.sampled_from(["rocee", "iwarp", "RXE", "soft-roce"]))
        else:
            values[place] = draw(st.sampled_from(OUT_OF_RANGE[str(last)]))
    return values


def _inject_relations(draw: st.DrawFn, doc: dict[str, Any]) -> list[tuple[str | int, ...]]:
    """Problems between values (cross checks), made in `doc`; the fields they are at."""
    nodes, links = list(doc["nodes"]), doc.get("links", [])
    provider = doc.get("provider", "qemu")
    kinds = ["rdma-without-link"] if not links else ["rdma-without-link", "dangling"]
    if provider in ("qemu", "docker"):
        kinds += ["defaults-image", "node-image"]
    if provider != "docker" and not doc.get("hosts"):
        kinds += ["hosts"]
    if len(links) >= 2:
        kinds += ["segment-name", "overlap"]
    if links:
        kinds += ["prefix-not-longer"]
    chosen = draw(st.lists(st.sampled_from(kinds), unique=True, max_size=5))
    if "dangling" in chosen and "rdma-without-link" in chosen:
        # a node without a link is not flagged while an endpoint names no node: it is
        # most likely the one the endpoint meant
        chosen.remove("rdma-without-link")
    fields: list[tuple[str | int, ...]] = []
    for kind in chosen:
        if kind == "rdma-without-link":
            new = draw(valid_node_name.filter(lambda s: s not in nodes))
            doc["nodes"][new] = {"rdma": draw(st.sampled_from(["rxe", "siw"]))}
            fields.append(("nodes", new, "rdma"))
        elif kind == "dangling":
            i = draw(st.integers(0, len(links) - 1))
            j = draw(st.integers(0, len(links[i]["endpoints"]) - 1))
            node = draw(valid_node_name.filter(lambda s: s not in doc["nodes"]))
            links[i]["endpoints"][j] = f"{node}:{links[i]['endpoints'][j].split(':')[1]}"
            fields.append(("links", i, "endpoints", j))
        elif kind == "defaults-image":
            doc.setdefault("defaults", {})["image"] = draw(st.sampled_from(UNKNOWN_IMAGES))
            fields.append(("defaults", "image"))
        elif kind == "node-image":
            n = draw(st.sampled_from(nodes))
            _node_mapping(doc, n)["image"] = draw(st.sampled_from(UNKNOWN_IMAGES))
            fields.append(("nodes", n, "image"))
        elif kind == "hosts":
            doc["hosts"] = {"h1": "local"}
            fields.append(("hosts",))
        elif kind == "segment-name":
            i, k = sorted(draw(st.lists(st.integers(0, len(links) - 1), min_size=2,
                                        max_size=2, unique=True)))
            links[k]["name"] = links[i].get("name") or f"link{i + 1}"
            fields.append(("links", k, "name"))
        elif kind == "overlap":
            i, k = sorted(draw(st.lists(st.integers(0, len(links) - 1), min_size=2,
                                        max_size=2, unique=True)))
            links[i]["subnet"] = "172.31.0.0/16"
            links[k]["subnet"] = f"172.31.{draw(st.integers(0, 255))}.0/24"
            fields.append(("links", k, "subnet"))
        else:  # prefix-not-longer
            plen = draw(st.integers(8, 24))
            doc["addressing"] = {"pool": f"10.0.0.0/{plen}", "prefix": draw(st.integers(1, plen))}
            fields.append(("addressing", "prefix"))
    return fields


@st.composite
def several_problems(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A good file with several independent problems: (YAML text, the fields reported)."""
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    relations = _inject_relations(draw, doc)
    values = _inject_values(draw, doc)
    for path, value in values.items():
        if path[0] == "nodes":
            _node_mapping(doc, str(path[1]))
        _set(doc, path, value)
    expected = list(values) if values else relations
    assume(expected)
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), sorted(map(_field, expected))


SEVERAL = int(__import__("os").environ.get("TOPO_SEVERAL", "300"))


@settings(max_examples=SEVERAL, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(several_problems())
def test_several_independent_problems_are_each_reported(case: tuple[str, list[str]]) -> None:
    text, fields = case
    with pytest.raises(TopologyError) as info:
        _load(text, "m.yaml")
    err = info.value
    assert sorted(p.field for p in err.problems) == fields, err.message
    assert err.more == 0
    # file order: by line (problems on one line in the order of their keys)
    lines = [p.line for p in err.problems]
    assert None not in lines and lines == sorted(lines), err.message  # type: ignore[type-var]
    assert [p.text("m.yaml") for p in err.problems] == _problem_lines(err)


yaml_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-10, 70000),
    st.text(max_size=12),
    st.sampled_from(
        [
            "rxe",
            "siw",
            "none",
            "qemu",
            "node1:eth1",
            "node2:eth1",
            "10.77.0.0/16",
            "node1",
            "eth1",
            "10.1.0.0/24",
        ]
    ),
)
yaml_keys = st.sampled_from(
    [
        "name",
        "provider",
        "defaults",
        "addressing",
        "nodes",
        "links",
        "rdma",
        "memory",
        "cpus",
        "image",
        "mtu",
        "pool",
        "prefix",
        "endpoints",
        "subnet",
        "node1",
        "node2",
        "x",
    ]
)
yaml_values = st.recursive(
    yaml_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(yaml_keys, inner, max_size=5),
    max_leaves=25,
)
RANDOM_DOCS = int(__import__("os").environ.get("TOPO_RANDOM", "300"))
RANDOM_TEXTS = int(__import__("os").environ.get("TOPO_RANDOM", "300"))


@settings(max_examples=RANDOM_DOCS, deadline=None)
@given(st.dictionaries(yaml_keys, yaml_values, max_size=6))
def test_random_documents_never_crash(doc: dict[str, Any]) -> None:
    text = yaml.safe_dump(doc, sort_keys=False)
    try:
        lab = _load(text)
    except TopologyError as err:
        assert err.line is not None
        assert err.field or err.message.startswith("t.yaml:")
    else:
        assert isinstance(lab, Lab)


@settings(max_examples=RANDOM_TEXTS, deadline=None)
@given(
    st.one_of(
        st.text(max_size=200),
        st.lists(
            st.sampled_from(
                [
                    "name: t\n",
                    "nodes:\n",
                    "  a: {}\n",
                    "  b:\n",
                    "links:\n",
                    "  - endpoints: [a:eth1,",
                    " b:eth1]\n",
                    "\t",
                    "  ",
                    "- ",
                    ": ",
                    "{",
                    "}",
                    "[",
                    "]",
                    "&x ",
                    "*x ",
                    "<<: *x\n",
                    "'",
                    '"',
                    "#",
                    "\n",
                    "---\n",
                    "name: t\n",
                    "!!binary ",
                    "? ",
                    "%YAML 1.1\n",
                ]
            ),
            max_size=30,
        ).map("".join),
    )
)
def test_random_text_never_crashes(text: str) -> None:
    try:
        lab = _load(text)
    except TopologyError as err:
        assert err.line is None or err.line >= 1
        assert err.message.startswith("t.yaml")
    else:
        assert isinstance(lab, Lab)
