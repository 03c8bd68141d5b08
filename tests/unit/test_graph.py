"""`labctl graph`: every shipped topology in every text format against its golden file
(UPDATE_GOLDEN=1 rewrites them), a lab that is up drawn from its files only, SVG and PNG
for real when matplotlib is installed, and every refusal (exit 2, nothing written)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from labctl.store.labdir import LabDir
from labctl.store.state import LabState, atomic_write
from labctl.topology.catalog import find_topology
from labctl.topology.graph import build_graph
from labctl.topology.graph_draw import layout
from labctl.topology.graph_text import render_dot, render_mermaid, render_text
from labctl.topology.load import load_lab
from labctl.topology.resolved import Segment
from tests.unit.clirun import run_main
from tests.unit.jsonshape import parsed

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden" / "graph"
CAPTURED_STATE = Path(__file__).parent / "outputs" / "status" / "state.json"
SHIPPED = sorted(p.stem for p in (ROOT / "topologies").glob("*.yaml"))
RENDERERS = {"txt": render_text, "dot": render_dot, "mmd": render_mermaid}
CASES = [(t, s) for t in SHIPPED for s in RENDERERS]

try:
    import matplotlib  # noqa: F401
    HAVE_MATPLOTLIB = True
except ImportError:
    HAVE_MATPLOTLIB = False
needs_matplotlib = pytest.mark.skipif(not HAVE_MATPLOTLIB, reason="the plot extra is absent")


def _cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
         *args: str) -> tuple[int, str, str]:
    code, out, err = run_main(monkeypatch, capsys, "graph", *args)
    return code, out, " ".join(err.split())


def _make_lab(state: Path, name: str = "ut-graph", topology: str = "two-node") -> LabDir:
    """A lab directory as `up` leaves it: lab.json and a qemu state.json of a live lab."""
    lab = dataclasses.replace(load_lab(find_topology(topology)), name=name)
    labdir = LabDir(name, state)
    labdir.create(lab)
    labdir.save_state(LabState.from_json(CAPTURED_STATE.read_text()))
    return labdir


# --- goldens -----------------------------------------------------------------------------
def test_every_shipped_topology_has_goldens() -> None:
    assert len(SHIPPED) == 9
    assert sorted(p.name for p in GOLDEN.iterdir()) == sorted(f"{t}.{s}" for t, s in CASES)


@pytest.mark.parametrize(("topology", "suffix"), CASES, ids=[f"{t}.{s}" for t, s in CASES])
def test_shipped_topology_matches_golden(topology: str, suffix: str) -> None:
    actual = RENDERERS[suffix](build_graph(load_lab(find_topology(topology))))
    golden = GOLDEN / f"{topology}.{suffix}"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(actual)
    assert actual == golden.read_text()


@pytest.mark.parametrize("topology", SHIPPED)
def test_cli_prints_the_golden_text_of_a_topology_file(
        topology: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(monkeypatch, capsys, str(ROOT / "topologies" / f"{topology}.yaml"))
    assert code == 0
    assert out == (GOLDEN / f"{topology}.txt").read_text()


def test_graph_shows_switches_and_routers_as_such() -> None:
    routed = render_text(build_graph(load_lab(find_topology("routed"))))
    assert "  router  router  no RDMA" in routed
    assert "node1  10.77.2.0/24 via 10.77.1.1" in routed
    switch = render_text(build_graph(load_lab(find_topology("three-node-switch"))))
    assert "  lan  switch  10.77.1.0/24  mtu 9000" in switch
    assert "`-- node3 eth1 10.77.1.3/24" in switch
    assert "siw on eth1" in render_text(build_graph(load_lab(find_topology("siw-pair"))))
    multi = render_text(build_graph(load_lab(find_topology("multi-host"))))
    assert "on host h1" in multi and "on host h2" in multi


# --- a lab that is up --------------------------------------------------------------------
def test_a_lab_that_is_up_shows_its_recorded_devices(
        state_dir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _make_lab(state_dir)
    for args in ((), ("--lab", "ut-graph")):  # the only lab, and by name
        code, out, _ = _cli(monkeypatch, capsys, *args)
        assert code == 0
        assert out.splitlines()[0] == "lab ut-graph (qemu, phase up): 2 nodes"
        assert "node1  node    rxe0 (rxe on eth1) ACTIVE" in out


def test_graph_of_a_lab_never_asks_its_nodes(
        state_dir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import labctl.lab.handle

    def tripwire(*_: object, **__: object) -> None:
        raise AssertionError("graph reached a node")

    monkeypatch.setattr(labctl.lab.handle.LabHandle, "__init__", tripwire)
    _make_lab(state_dir)
    assert _cli(monkeypatch, capsys, "--format", "dot")[0] == 0


def test_json_of_a_lab_has_the_documented_shape(
        state_dir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _make_lab(state_dir, topology="three-node-switch")
    code, out, _ = _cli(monkeypatch, capsys, "--json")
    assert code == 0
    graph = parsed("graph", out)
    assert graph.phase == "up"
    assert [v.kind for v in graph.vertices] == ["node", "node", "node", "switch"]
    assert [(e.ends[0].vertex, e.ends[1].vertex) for e in graph.edges] == [
        ("node1", "switch:lan"), ("node2", "switch:lan"), ("node3", "switch:lan")]
    assert graph.vertices[0].device == "rxe0" and graph.vertices[0].port_state == "ACTIVE"


@pytest.mark.parametrize("topology", SHIPPED)
def test_json_of_every_shipped_topology_has_the_documented_shape(
        topology: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(monkeypatch, capsys, topology, "--json")
    assert code == 0
    graph = parsed("graph", out)
    assert graph.lab == topology and graph.phase == ""
    assert all(len(e.ends) == 2 for e in graph.edges)


def test_a_lab_with_a_corrupt_state_is_still_drawn(
        state_dir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    labdir = _make_lab(state_dir)
    labdir.state_file.write_text("{not json")
    code, out, _ = _cli(monkeypatch, capsys)
    assert code == 0
    assert out.splitlines()[0] == "lab ut-graph (qemu, phase ?): 2 nodes"
    assert "node1  node    rxe on eth1" in out


# --- images ------------------------------------------------------------------------------
@needs_matplotlib
@pytest.mark.parametrize("topology", SHIPPED)
def test_svg_is_xml_that_names_every_node(
        topology: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "lab.svg"
    code, out, _ = _cli(monkeypatch, capsys, topology, "-o", str(target))
    assert (code, out.strip()) == (0, f"svg: {target}")
    root = ET.fromstring(target.read_bytes())
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = " ".join(t for e in root.iter() for t in (e.text or "").split())
    for node in load_lab(find_topology(topology)).nodes:
        assert node.name in texts
    assert [p.name for p in tmp_path.iterdir()] == ["lab.svg"]  # no temp file left


@needs_matplotlib
def test_png_is_a_png_of_the_figure_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "lab.PNG"  # the suffix is read case-blind
    target.write_bytes(b"old")  # replaced whole
    assert _cli(monkeypatch, capsys, "four-node", "-o", str(target))[0] == 0
    data = target.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # IHDR
    assert (width, height) == (1000, 650)
    assert _cli(monkeypatch, capsys, "routed", "--format", "png", "-o", str(target))[0] == 0
    assert struct.unpack(">II", target.read_bytes()[16:24]) == (1000, 350)  # a chain: one row


@needs_matplotlib
def test_svg_is_the_same_for_the_same_lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "a.svg", tmp_path / "b.svg"
    for target in (first, second):
        assert _cli(monkeypatch, capsys, "routed", "-o", str(target))[0] == 0
    assert first.read_bytes() == second.read_bytes()


@pytest.mark.parametrize(("topology", "rows"), [("two-node", 1), ("routed", 1),
                                                ("four-node", 3), ("three-node-switch", 3)])
def test_layout_puts_chains_in_a_row_and_switches_in_the_middle(topology: str,
                                                                rows: int) -> None:
    graph = build_graph(load_lab(find_topology(topology)))
    points = layout(graph)
    assert len({y for _, y in points.values()}) == rows
    for vertex in graph.vertices:
        if vertex.kind == "switch":
            assert points[vertex.id] == (0.0, 0.0)
    if topology == "routed":  # in chain order: node1, the router, node2
        assert sorted(points, key=lambda v: points[v][0]) == ["node1", "router", "node2"]


def test_text_formats_written_to_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    for suffix, golden in ((".dot", "dot"), (".gv", "dot"), (".mmd", "mmd"),
                           (".mermaid", "mmd"), (".txt", "txt")):
        target = tmp_path / f"routed{suffix}"
        assert _cli(monkeypatch, capsys, "routed", "-o", str(target))[0] == 0
        assert target.read_text() == (GOLDEN / f"routed.{golden}").read_text()
    target = tmp_path / "any-name"
    assert _cli(monkeypatch, capsys, "routed", "--format", "mermaid", "-o", str(target))[0] == 0
    assert target.read_text() == (GOLDEN / "routed.mmd").read_text()


def test_a_failed_write_leaves_the_old_file_and_no_temp(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "lab.dot"
    target.write_text("old")

    def broken(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError):
        atomic_write(target, b"new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["lab.dot"]


# --- refusals ----------------------------------------------------------------------------
REFUSALS: list[tuple[list[str], str]] = [
    (["two-node", "--format", "jpeg"], "unknown --format 'jpeg' hint: formats: text, dot, "
     "mermaid, svg, png"),
    (["two-node", "-o", "{tmp}/lab.jpg"], "cannot tell the format of"),
    (["two-node", "-o", "{tmp}/lab"], "hint: name it with one of .txt, .dot, .gv, .mmd, "
     ".mermaid, .svg, .png"),
    (["two-node", "-o", "{tmp}/no/such/dir/lab.svg"], "its directory does not exist"),
    (["two-node", "-o", "{tmp}/adir.dot"], "is a directory"),
    (["two-node", "--format", "png"], "--format png writes a file: give -o FILE.png"),
    (["two-node", "--format", "svg"], "--format svg writes a file"),
    (["two-node", "--lab", "ut-graph"], "give a TOPOLOGY or --lab, not both"),
    (["two-node", "--json", "--format", "dot"], "--json prints the graph as JSON"),
    (["two-node", "--json", "-o", "{tmp}/g.json"], "it takes no --format or -o"),
    (["no-such-topology"], "is neither a topology file nor a shipped topology"),
    (["{tmp}/missing.yaml"], "cannot read the topology file"),
    (["--lab", "nolab"], "no lab named 'nolab' is up"),
    (["--lab", "Bad/Name"], "bad lab name 'Bad/Name'"),
]


@pytest.mark.parametrize(("args", "says"), REFUSALS, ids=[" ".join(a) for a, _ in REFUSALS])
def test_bad_input_is_refused(args: list[str], says: str, tmp_path: Path, state_dir: Path,
                              monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "adir.dot").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = _cli(monkeypatch, capsys, *(a.format(tmp=tmp_path) for a in args))
    assert code == 2, (out, err)
    assert out == ""
    assert says in err and err.startswith("error: ") and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_no_lab_up(state_dir: Path, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(monkeypatch, capsys)
    assert (code, out) == (2, "")
    assert "error: no lab is up hint: start one with `labctl up TOPOLOGY`" in err


def test_several_labs_up(state_dir: Path, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    _make_lab(state_dir, "ut-one")
    _make_lab(state_dir, "ut-two")
    code, _, err = _cli(monkeypatch, capsys)
    assert code == 2 and "several labs are up (ut-one, ut-two)" in err
    assert "choose one with --lab NAME" in err


@pytest.mark.parametrize("fmt", ["svg", "png"])
def test_images_without_matplotlib_say_how_to_install_it(
        fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    code, out, err = _cli(monkeypatch, capsys, "two-node", "-o", str(tmp_path / f"lab.{fmt}"))
    assert (code, out) == (2, "")
    assert f"--format {fmt} needs matplotlib" in err and "pip install 'labctl[plot]'" in err
    assert list(tmp_path.iterdir()) == []
    assert _cli(monkeypatch, capsys, "two-node", "--format", "dot")[0] == 0  # text still works


def test_help(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(monkeypatch, capsys, "graph", "--help")
    flat = " ".join(out.split())
    assert code == 0
    for words in ("TOPOLOGY", "--lab", "NAME", "text|dot|mermaid|svg|png", "--output",
                  "FILE", "--json", "switches and routers",
                  "links with interfaces, addresses and MTU"):
        assert words in flat
    assert "graph" in run_main(monkeypatch, capsys, "--help")[1]


# --- hostile names from an edited lab.json -----------------------------------------------
HOSTILE = ['a"b', "a\\b", "a\nb", "a|b", "a<b>c", "a&b", "a]b", 'x" -- "y']


@pytest.mark.parametrize("name", HOSTILE)
def test_names_are_escaped_in_dot_and_mermaid(name: str) -> None:
    lab = load_lab(find_topology("three-node-switch"))
    segment: Segment = dataclasses.replace(lab.segments[0], name=name)
    graph = build_graph(dataclasses.replace(lab, segments=(segment,)))
    dot = render_dot(graph)
    for line in dot.splitlines()[1:-1]:  # every statement: quotes balanced, one line
        assert line.replace('\\"', "").count('"') % 2 == 0, line
        assert line.endswith(";")
    mermaid = render_mermaid(graph)
    for line in mermaid.splitlines()[2:]:  # inside a label's quotes: entity codes only
        inside = line.split('"', 1)[1].rsplit('"', 1)[0].replace("<br/>", "")
        assert not set(inside) & set('"<>|'), line
    assert len(mermaid.splitlines()) == 2 + 4 + 3  # header, vertices, edges: no line broken
    assert json.loads(json.dumps(graph.to_dict()))["vertices"][3]["name"] == name


def test_control_characters_never_reach_the_terminal() -> None:
    lab = load_lab(find_topology("two-node"))
    segment = dataclasses.replace(lab.segments[0], name="\x1b]0;owned\x07lan")
    text = render_text(build_graph(dataclasses.replace(lab, segments=(segment,))))
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b]0;owned\\x07lan  10.77.1.0/24" in text


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")
@pytest.mark.parametrize("topology", SHIPPED)
def test_graphviz_draws_every_golden_dot(topology: str, tmp_path: Path) -> None:
    target = tmp_path / "out.svg"
    subprocess.run(["dot", "-Tsvg", str(GOLDEN / f"{topology}.dot"), "-o", str(target)],
                   check=True, timeout=60)
    root = ET.fromstring(target.read_bytes())
    titles = {t.text for t in root.iter("{http://www.w3.org/2000/svg}title")}
    graph = build_graph(load_lab(find_topology(topology)))
    assert {v.id for v in graph.vertices} <= titles


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")
@pytest.mark.parametrize("name", HOSTILE)
def test_graphviz_reads_hostile_names_as_one_vertex(name: str, tmp_path: Path) -> None:
    lab = load_lab(find_topology("three-node-switch"))
    segment = dataclasses.replace(lab.segments[0], name=name)
    source = tmp_path / "lab.dot"
    source.write_text(render_dot(build_graph(dataclasses.replace(lab, segments=(segment,)))))
    out = subprocess.run(["dot", "-Tsvg", str(source)], check=True, timeout=60,
                         capture_output=True).stdout
    nodes = [g for g in ET.fromstring(out).iter("{http://www.w3.org/2000/svg}g")
             if g.get("class") == "node"]
    assert len(nodes) == 4  # three nodes and the switch: no name made another vertex
