"""Routes through router nodes: computed from the topology, merged with explicit ones, and
the path a packet takes through the resolved lab (which routers it passes)."""

from __future__ import annotations

from pathlib import Path

from labctl.topology.load import load_lab
from labctl.topology.resolved import Lab
from labctl.topology.routing import route_path

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "topology"


def _lab(tmp_path: Path, text: str) -> Lab:
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    return load_lab(path)


def test_shipped_routed_lab_crosses_one_router() -> None:
    lab = load_lab(ROOT / "topologies" / "routed.yaml")
    assert route_path(lab, "node1", "10.77.2.2") == ["router"]
    assert route_path(lab, "node2", "10.77.1.2") == ["router"]
    assert route_path(lab, "node1", "10.77.1.1") == []  # the router's near address
    assert route_path(lab, "node1", "10.77.2.1") == ["router"]  # its far one: forwarded


def test_chain_of_two_routers_and_a_summary_route() -> None:
    lab = load_lab(DATA / "input" / "routed-chain.yaml")
    # a's explicit 10.77.0.0/16 replaced the computed routes it covers
    assert [(r.to, r.via) for r in lab.node("a").routes] == [("10.77.0.0/16", "10.77.1.1")]
    assert route_path(lab, "a", "10.77.3.2") == ["r1", "r2"]
    assert route_path(lab, "b", "10.77.1.2") == ["r2", "r1"]
    assert route_path(lab, "b", "10.77.3.3") == []


def test_no_routers_no_routes_no_path(tmp_path: Path) -> None:
    lab = _lab(tmp_path, """
name: split
nodes: {a: {}, b: {}, c: {}, d: {}}
links:
  - endpoints: [a:eth1, b:eth1]
  - endpoints: [c:eth1, d:eth1]
""")
    assert all(n.routes == () and not n.router for n in lab.nodes)
    assert route_path(lab, "a", "10.77.1.2") == []
    assert route_path(lab, "a", "10.77.2.1") is None
    assert route_path(lab, "a", "10.77.1.9") is None  # on the segment, but nobody has it


def test_nearest_router_wins_and_ties_go_to_the_first(tmp_path: Path) -> None:
    # a's segment has two routers; r1 (first in the file) reaches x directly, r2 too.
    lab = _lab(tmp_path, """
name: ties
nodes:
  a: {}
  r1: {rdma: none, router: true}
  r2: {rdma: none, router: true}
  x: {}
links:
  - endpoints: [a:eth1, r1:eth1, r2:eth1]
  - endpoints: [r1:eth2, r2:eth2, x:eth1]
""")
    assert [(r.to, r.via) for r in lab.node("a").routes] == [("10.77.2.0/24", "10.77.1.2")]
    assert route_path(lab, "a", "10.77.2.3") == ["r1"]
    assert [(r.to, r.via) for r in lab.node("x").routes] == [("10.77.1.0/24", "10.77.2.1")]


def test_an_unreachable_island_gets_no_route(tmp_path: Path) -> None:
    lab = _lab(tmp_path, """
name: island
nodes:
  a: {}
  r: {rdma: none, router: true}
  b: {}
  c: {}
  d: {}
links:
  - endpoints: [a:eth1, r:eth1]
  - endpoints: [r:eth2, b:eth1]
  - endpoints: [c:eth1, d:eth1]
""")
    assert [r.to for r in lab.node("a").routes] == ["10.77.2.0/24"]
    assert lab.node("c").routes == ()
    assert route_path(lab, "a", "10.77.3.1") is None
    assert route_path(lab, "c", "10.77.1.1") is None


def test_validate_summary_shows_routers_and_routes() -> None:
    from labctl.cli.validate import summary

    text = summary(load_lab(ROOT / "topologies" / "routed.yaml"))
    assert text.splitlines()[-4:] == [
        "routing:",
        "  node1   10.77.2.0/24 via 10.77.1.1",
        "  node2   10.77.1.0/24 via 10.77.2.1",
        "  router  router, no routes",
    ]
    assert "routing:" not in summary(load_lab(ROOT / "topologies" / "two-node.yaml"))


def test_a_device_per_link_is_chosen_by_the_segment_used() -> None:
    from labctl.node.env import node_env
    from labctl.runners.pairs import ip_path, pair_interfaces, resolve_pairs

    lab = load_lab(DATA / "input" / "two-devices.yaml")
    hub = lab.node("hub")
    assert [i.name for i in hub.rdma_interfaces] == ["eth1", "eth2"]
    assert node_env(lab, hub)["LABCTL_RDMA_EXTRA"] == "rxe1,eth2"
    assert "LABCTL_RDMA_EXTRA" not in node_env(lab, lab.node("left"))
    # hub serves left on eth1 (rxe0) and right on eth2 (rxe1); left and right: no path
    assert resolve_pairs(lab, "adjacent") == [("hub", "left"), ("hub", "right")]
    left, right = pair_interfaces(lab, "hub", "left"), pair_interfaces(lab, "hub", "right")
    assert left is not None and right is not None
    assert [(i.name, i.address) for i in left] == [("eth1", "10.77.1.1"), ("eth1", "10.77.1.2")]
    assert [(i.name, i.address) for i in right] == [("eth2", "10.77.2.1"),
                                                     ("eth1", "10.77.2.2")]
    assert hub.device_index(right[0]) == 1
    assert ip_path(lab, "left", "right") is None
    assert ip_path(lab, "right", "hub") == []


def test_a_device_per_link_behind_a_router(tmp_path: Path) -> None:
    from labctl.runners.pairs import pair_interfaces

    # b has devices on both links; a reaches b's eth2 device only through r, but b's eth1
    # device is on a's own segment: that one is used.
    lab = _lab(tmp_path, """
name: both
nodes:
  a: {}
  r: {rdma: none, router: true}
  b: {rdma_interfaces: [eth2, eth1]}
links:
  - endpoints: [a:eth1, r:eth1, b:eth1]
  - endpoints: [r:eth2, b:eth2]
""")
    pair = pair_interfaces(lab, "b", "a")
    assert pair is not None and [i.name for i in pair] == ["eth1", "eth1"]
    assert lab.node("b").device_index(pair[0]) == 1  # listed second: rxe1


def test_an_endpoint_on_a_second_device_names_its_device_and_interface() -> None:
    """The run's endpoint for hub's rxe1 (eth2): its GID index is read live, and the
    failure snapshot reads that interface (it was left empty once)."""
    from types import SimpleNamespace

    from labctl.runners.execute import endpoint
    from labctl.runners.pairs import pair_interfaces

    lab = load_lab(DATA / "input" / "two-devices.yaml")
    devices = [{"name": "rxe0", "gid_index": 1}, {"name": "rxe1", "gid_index": 3}]
    handle = SimpleNamespace(lab=lab, node_status=lambda node: {"devices": devices})
    right = pair_interfaces(lab, "hub", "right")
    assert right is not None
    ep = endpoint(handle, "hub", right[0])  # type: ignore[arg-type]
    assert (ep.device, ep.gid_index, ep.address, ep.interface) == (
        "rxe1", 3, "10.77.2.1", "eth2")
