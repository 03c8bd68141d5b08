"""Topology layer: golden resolved labs, addressing and naming rules, schema, `labctl validate`.

Golden files: tests/unit/topology/input/*.yaml resolve to expected/*.json.
Regenerate them with `UPDATE_GOLDEN=1 python -m pytest tests/unit/test_topology.py`
and review the diff.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from labctl.errors import UsageError
from labctl.topology.errors import TopologyError
from labctl.topology.load import (
    json_schema,
    load_lab,
    load_topology,
    parse_topology,
    resolve,
    schema_text,
)
from labctl.topology.model import LinkSpec, NodeSpec, Topology
from labctl.topology.resolved import Lab

HERE = Path(__file__).parent
DATA = HERE / "topology"
REPO = HERE.parent.parent
TOPOLOGIES = REPO / "topologies"
INPUTS = sorted((DATA / "input").glob("*.yaml"))
SHIPPED = sorted(TOPOLOGIES.glob("*.yaml"))


def _lab(text: str) -> Lab:
    return resolve(parse_topology(text, "t.yaml"), "t.yaml")


# --------------------------------------------------------------------------- golden files


@pytest.mark.parametrize("path", INPUTS, ids=[p.stem for p in INPUTS])
def test_golden(path: Path) -> None:
    lab = resolve(load_topology(path), f"input/{path.name}")
    expected = DATA / "expected" / f"{path.stem}.json"
    if os.environ.get("UPDATE_GOLDEN"):
        expected.write_text(lab.to_json() + "\n")
    assert expected.exists(), f"no golden file {expected}; run with UPDATE_GOLDEN=1"
    assert lab.to_json() + "\n" == expected.read_text()


def test_golden_inputs_are_many_enough() -> None:
    assert len(INPUTS) >= 6
    assert {p.stem for p in INPUTS} == {p.stem for p in (DATA / "expected").glob("*.json")}


@pytest.mark.parametrize("path", INPUTS + SHIPPED, ids=[p.stem for p in INPUTS + SHIPPED])
def test_json_round_trip(path: Path) -> None:
    lab = load_lab(path)
    assert Lab.from_json(lab.to_json()) == lab


# --------------------------------------------------------------------------- shipped files


def test_shipped_topologies_exist() -> None:
    names = {p.name for p in SHIPPED}
    assert {"two-node.yaml", "three-node-switch.yaml", "four-node.yaml", "siw-pair.yaml"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_topology_is_valid_and_commented(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("#"), "each topology starts with a comment header"
    lab = load_lab(path)
    assert lab.name == path.stem
    assert lab.source == str(path)
    # every node has an RDMA device, or is a router (which needs none)
    assert all(n.rdma_interface is not None or n.router for n in lab.nodes)


def test_shipped_topology_shapes() -> None:
    four = load_lab(TOPOLOGIES / "four-node.yaml")
    assert [s.kind for s in four.segments] == ["switch"]
    assert len(four.segments[0].endpoints) == 4
    sixteen = load_lab(TOPOLOGIES / "sixteen-node.yaml")
    assert [s.kind for s in sixteen.segments] == ["switch"]
    assert [n.name for n in sixteen.nodes] == [f"node{i}" for i in range(1, 17)]
    assert {(n.rdma, n.memory_mib) for n in sixteen.nodes} == {("rxe", 512)}
    assert sixteen.node("node16").interfaces[0].ipv4 == "10.77.1.16/24"
    three = load_lab(TOPOLOGIES / "three-node-switch.yaml")
    assert [s.kind for s in three.segments] == ["switch"]
    routed = load_lab(TOPOLOGIES / "routed.yaml")
    assert [(n.name, n.rdma, n.router) for n in routed.nodes] == [
        ("node1", "rxe", False), ("node2", "rxe", False), ("router", "none", True)]
    assert [(r.to, r.via) for r in routed.node("node1").routes] == [("10.77.2.0/24",
                                                                     "10.77.1.1")]
    assert [(r.to, r.via) for r in routed.node("node2").routes] == [("10.77.1.0/24",
                                                                     "10.77.2.1")]
    siw = load_lab(TOPOLOGIES / "siw-pair.yaml")
    assert {n.rdma for n in siw.nodes} == {"siw"}
    two = load_lab(TOPOLOGIES / "two-node.yaml")
    assert [s.kind for s in two.segments] == ["p2p"]
    assert {n.rdma for n in two.nodes} == {"rxe"}


def test_schema_file_matches_model() -> None:
    """topologies/schema.json is `labctl schema` output; regenerate it when the model changes:
    `python -m labctl schema > topologies/schema.json`."""
    committed = (TOPOLOGIES / "schema.json").read_text()
    assert json.loads(committed) == json_schema()
    assert committed == schema_text()


def test_schema_describes_the_format() -> None:
    schema = json_schema()
    assert schema["required"] == ["name", "nodes"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert set(props) == {"name", "provider", "defaults", "addressing", "nodes", "links",
                          "hosts"}
    assert all("description" in p for p in props.values())
    assert all("title" in p for p in props.values() if "$ref" not in p)
    for model in schema["$defs"].values():
        assert model["description"] and model["additionalProperties"] is False
        assert all("description" in p and "title" in p for p in model["properties"].values())
    assert props["provider"]["enum"] == ["qemu", "docker", "vagrant"]
    assert list(props["nodes"]["patternProperties"]) == ["^[a-z][a-z0-9-]{0,14}$"]
    assert props["nodes"]["additionalProperties"] is False


def test_schema_accepts_good_files_and_rejects_bad_ones() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    validator = jsonschema.Draft202012Validator(json_schema())
    for path in INPUTS + SHIPPED:
        validator.validate(yaml.safe_load(path.read_text()))
    for doc in (
        {"name": "x", "nodes": {"n": {"rdma": "rocee"}}},
        {"name": "x", "nodes": {"N1": {}}},
        {"name": "x", "nodes": {"n": {}}, "links": [{"endpoints": ["n:eth0", "m:eth1"]}]},
        {"name": "x", "nodes": {"n": {}}, "extra": 1},
    ):
        assert not validator.is_valid(doc), doc


# --------------------------------------------------------------------------- resolution


TWO = """\
name: two-node
nodes:
  node1: {}
  node2: {}
links:
  - endpoints: [node1:eth1, node2:eth1]
"""


def test_defaults_applied() -> None:
    lab = _lab(TWO)
    assert lab.provider == "qemu"
    assert lab.provider_options == {}
    for index, node in enumerate(lab.nodes, start=1):
        assert (node.index, node.rdma, node.memory_mib, node.cpus, node.image) == (
            index,
            "rxe",
            512,
            1,
            "trixie",
        )
    seg = lab.segments[0]
    assert (seg.index, seg.name, seg.kind, seg.subnet, seg.mtu) == (
        0,
        "link1",
        "p2p",
        "10.77.1.0/24",
        1500,
    )
    assert lab.node("node1").interfaces[0].ipv4 == "10.77.1.1/24"
    assert lab.node("node2").interfaces[0].address == "10.77.1.2"


def test_node_overrides_defaults() -> None:
    lab = _lab(
        "name: t\ndefaults: {rdma: siw, memory: 1024, cpus: 2, image: sid, mtu: 4000}\n"
        "nodes:\n  a: {rdma: rxe, memory: 128, cpus: 64, image: trixie}\n  b:\n"
        "links:\n  - endpoints: [a:eth1, b:eth1]\n"
    )
    a, b = lab.nodes
    assert (a.rdma, a.memory_mib, a.cpus, a.image) == ("rxe", 128, 64, "trixie")
    assert (b.rdma, b.memory_mib, b.cpus, b.image) == ("siw", 1024, 2, "sid")
    assert lab.segments[0].mtu == 4000
    assert a.interfaces[0].mtu == 4000


def test_link_mtu_overrides_default() -> None:
    lab = _lab(TWO.replace("eth1]\n", "eth1]\n    mtu: 9000\n"))
    assert lab.segments[0].mtu == 9000
    assert {i.mtu for n in lab.nodes for i in n.interfaces} == {9000}


def test_subnets_in_link_order_from_second_pool_subnet() -> None:
    text = "name: t\nnodes: {a: {}, b: {}}\nlinks:\n" + "".join(
        f"  - endpoints: [a:eth{i}, b:eth{i}]\n" for i in range(1, 5)
    )
    lab = _lab(text)
    assert [s.subnet for s in lab.segments] == [f"10.77.{i}.0/24" for i in range(1, 5)]
    assert [s.name for s in lab.segments] == ["link1", "link2", "link3", "link4"]


def test_auto_subnets_skip_explicit_ones() -> None:
    lab = _lab(
        "name: t\nnodes: {a: {}, b: {}}\nlinks:\n"
        "  - endpoints: [a:eth1, b:eth1]\n"
        "  - endpoints: [a:eth2, b:eth2]\n    subnet: 10.77.2.0/23\n"
        "  - endpoints: [a:eth3, b:eth3]\n"
    )
    assert [s.subnet for s in lab.segments] == ["10.77.1.0/24", "10.77.2.0/23", "10.77.4.0/24"]


def test_explicit_subnet_outside_pool_and_prefix() -> None:
    lab = _lab(
        "name: t\naddressing: {pool: 192.168.0.0/16, prefix: 30}\nnodes: {a: {}, b: {}, c: {}}\n"
        "links:\n  - endpoints: [a:eth1, b:eth1]\n"
        "  - endpoints: [a:eth2, b:eth2, c:eth1]\n    subnet: 172.16.5.0/29\n"
        "  - endpoints: [b:eth3, c:eth2]\n"
    )
    assert [s.subnet for s in lab.segments] == ["192.168.0.4/30", "172.16.5.0/29", "192.168.0.8/30"]
    assert [i.ipv4 for i in lab.node("c").interfaces] == ["172.16.5.3/29", "192.168.0.10/30"]


def test_pool_exactly_full() -> None:
    # /24 pool in /26s: 4 subnets, the first is never used: room for 3 links.
    head = "name: t\naddressing: {pool: 10.0.0.0/24, prefix: 26}\nnodes: {a: {}, b: {}}\nlinks:\n"
    links = "".join(f"  - endpoints: [a:eth{i}, b:eth{i}]\n" for i in range(1, 4))
    lab = _lab(head + links)
    assert [s.subnet for s in lab.segments] == ["10.0.0.64/26", "10.0.0.128/26", "10.0.0.192/26"]
    with pytest.raises(TopologyError, match="has room for only 3 /26 subnets, the lab needs 4"):
        _lab(head + links + "  - endpoints: [a:eth9, b:eth9]\n")


def test_switch_capacity_is_subnet_size_minus_two() -> None:
    nodes = "".join(f"  n{i}: {{}}\n" for i in range(1, 8))
    ends = ", ".join(f"n{i}:eth1" for i in range(1, 7))
    text = f"name: t\nnodes:\n{nodes}links:\n  - endpoints: [{ends}]\n    subnet: 10.9.9.0/29\n"
    text = text.replace("  n7: {}\n", "  n7: {rdma: none}\n")
    lab = _lab(text)
    assert lab.segments[0].kind == "switch"
    assert lab.node("n6").interfaces[0].ipv4 == "10.9.9.6/29"
    with pytest.raises(TopologyError, match=r"7 endpoints do not fit in 10\.9\.9\.0/29"):
        _lab(text.replace("n6:eth1]", "n6:eth1, n7:eth1]"))


def test_interfaces_sorted_by_number_and_macs() -> None:
    lab = _lab(
        "name: macs\nnodes: {a: {}, b: {}, c: {}}\nlinks:\n"
        "  - endpoints: [a:eth10, b:eth1]\n  - endpoints: [a:eth2, c:eth1]\n"
    )
    a = lab.node("a")
    assert [i.name for i in a.interfaces] == ["eth2", "eth10"]
    assert [i.segment for i in a.interfaces] == [1, 0]
    assert a.rdma_interface is not None and a.rdma_interface.name == "eth2"
    macs = [i.mac for n in lab.nodes for i in n.interfaces]
    assert len(set(macs)) == len(macs)
    for mac in macs:
        assert re.fullmatch(r"02(:[0-9a-f]{2}){5}", mac)
    assert a.interfaces[1].mac.endswith(":01:0a")  # node index 1, eth10
    assert lab.node("c").interfaces[0].mac.endswith(":03:01")
    import hashlib

    h = hashlib.sha256(b"macs").digest()
    assert a.interfaces[0].mac == f"02:{h[0]:02x}:{h[1]:02x}:{h[2]:02x}:01:02"


def test_macs_differ_between_labs_and_are_stable() -> None:
    one = _lab(TWO)
    other = _lab(TWO.replace("name: two-node", "name: two-node-b"))
    assert _lab(TWO) == one
    assert {i.mac for n in one.nodes for i in n.interfaces}.isdisjoint(
        {i.mac for n in other.nodes for i in n.interfaces}
    )


def test_node_without_link_allowed_with_rdma_none() -> None:
    lab = _lab("name: t\nnodes:\n  solo: {rdma: none}\n")
    assert lab.segments == ()
    assert lab.nodes[0].interfaces == ()
    assert lab.nodes[0].rdma_interface is None
    lab = _lab("name: t\ndefaults: {rdma: none}\nnodes: {a: , b: }\n")
    assert [n.rdma for n in lab.nodes] == ["none", "none"]


def test_node_order_is_file_order() -> None:
    lab = _lab("name: t\ndefaults: {rdma: none}\nnodes: {zed: {}, alpha: {}, mid: {}}\n")
    assert [(n.name, n.index) for n in lab.nodes] == [("zed", 1), ("alpha", 2), ("mid", 3)]


def test_max_nodes() -> None:
    def topo(n: int) -> str:
        return "name: t\ndefaults: {rdma: none}\nnodes:\n" + "".join(
            f"  n{i}: {{}}\n" for i in range(n)
        )

    assert len(_lab(topo(250)).nodes) == 250
    with pytest.raises(TopologyError, match=r"t\.yaml:3: nodes: too many nodes: 251"):
        _lab(topo(251))


def test_resolve_topology_built_in_code() -> None:
    topo = Topology(
        name="coded",
        nodes={"a": NodeSpec(), "b": None},
        links=[LinkSpec(endpoints=["a:eth1", "b:eth1"])],
    )
    lab = resolve(topo, "<code>")
    assert lab.source == "<code>"
    assert lab.segments[0].subnet == "10.77.1.0/24"
    bad = Topology(name="coded", nodes={"a": None, "b": None}, links=[])
    with pytest.raises(TopologyError) as info:
        resolve(bad, "<code>")
    assert info.value.line is None
    assert info.value.message == (
        "<code>: 2 problems\n"
        "  <code>: nodes.a: node a has rdma: rxe but no data link; add a link or set rdma: none\n"
        "  <code>: nodes.b: node b has rdma: rxe but no data link; add a link or set rdma: none"
    )


def test_load_lab_records_source(tmp_path: Path) -> None:
    path = tmp_path / "lab.yaml"
    path.write_text(TWO)
    assert load_lab(path).source == str(path)
    assert load_lab(str(path)).source == str(path)


def test_topology_error_is_a_usage_error() -> None:
    err = TopologyError("f.yaml", 7, "nodes.node3.rdma", "must be one of rxe, siw, none")
    assert isinstance(err, UsageError)
    assert err.exit_code == 2
    assert str(err) == err.message == "f.yaml:7: nodes.node3.rdma: must be one of rxe, siw, none"
    assert (err.file, err.line, err.field, err.reason) == (
        "f.yaml",
        7,
        "nodes.node3.rdma",
        "must be one of rxe, siw, none",
    )
    assert err.hint
    assert TopologyError("f.yaml", None, "", "gone").message == "f.yaml: gone"


# --------------------------------------------------------------------------- CLI


def _app() -> typer.Typer:
    """A fresh app with only this module's commands (the other commands may be in progress)."""
    from labctl.cli import validate

    app = typer.Typer()
    validate.register(app)
    return app


def test_cli_validate_good_files(monkeypatch: pytest.MonkeyPatch) -> None:
    # the inputs are checked against a host large enough for them (yaml-features.yaml's
    # node has 8 CPUs); the host checks have their own tests (test_trust_topology.py)
    from labctl.topology.host import HostFacts

    monkeypatch.setattr(HostFacts, "this", classmethod(lambda cls: cls(1 << 20, 64)))
    runner = CliRunner()
    assert SHIPPED and INPUTS
    for path in SHIPPED + INPUTS:
        result = runner.invoke(_app(), ["validate", str(path)])
        assert result.exit_code == 0, result.output
        lab = load_lab(path)
        assert f"lab {lab.name}: " in result.stdout
        for seg in lab.segments:
            assert seg.subnet in result.stdout
        for node in lab.nodes:
            assert node.name in result.stdout
            for iface in node.interfaces:
                assert iface.ipv4 in result.stdout


def test_cli_validate_summary_text() -> None:
    result = CliRunner().invoke(_app(), ["validate", str(TOPOLOGIES / "two-node.yaml")])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith("lab two-node: 2 nodes, 1 segment, provider qemu")
    assert lines[1] == "nodes:"
    assert "rdma rxe on eth1" in lines[2] and "eth1 10.77.1.1/24" in lines[2]
    assert lines[4] == "segments:"
    assert lines[5].split() == [
        "link1",
        "p2p",
        "10.77.1.0/24",
        "mtu",
        "1500",
        "node1:eth1=10.77.1.1",
        "node2:eth1=10.77.1.2",
    ]


def test_cli_validate_json() -> None:
    path = TOPOLOGIES / "three-node-switch.yaml"
    result = CliRunner().invoke(_app(), ["validate", "--json", str(path)])
    assert result.exit_code == 0
    assert Lab.from_json(result.stdout) == load_lab(path)


def test_cli_validate_bad_file() -> None:
    path = DATA / "bad" / "node-rdma-typo.yaml"
    result = CliRunner().invoke(_app(), ["validate", str(path)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert (
        f"error: {path}:5: nodes.node3.rdma: must be one of rxe, siw, none (got 'rocee')"
        in result.stderr
    )
    assert "hint: did you mean 'rxe'?" in result.stderr


def test_cli_validate_missing_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(_app(), ["validate", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "cannot read the topology file" in result.stderr


def test_cli_schema() -> None:
    result = CliRunner().invoke(_app(), ["schema"])
    assert result.exit_code == 0
    assert result.stdout == schema_text()
    assert json.loads(result.stdout) == json_schema()
