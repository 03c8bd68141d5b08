"""Golden tests: what the qemu provider would create for a topology (no VM is started)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from labctl.images.builder import Image
from labctl.providers.qemu import plan_lab
from labctl.topology.load import load_lab
from labctl.vm.machine import Restore

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"


def _plan_json(topology: str, accel: str, restore: bool = False) -> str:
    lab = load_lab(REPO / "topologies" / topology)
    image = Image(Path("/cache/img"), Path("/cache/img/vmlinuz"), Path("/cache/img/initrd.cpio"),
                  Path("/cache/img/root.ext4"), {})
    node_dirs = {n.name: Path("/labs") / lab.name / "nodes" / n.name for n in lab.nodes}
    ports = {n.name: 40000 + n.index for n in lab.nodes}
    saved_dir = Path("/cache/saved/trixie-0123456789abcdef")
    saved = ({n.name: Restore(saved_dir / "ram", saved_dir / "state") for n in lab.nodes}
             if restore else None)
    plan = plan_lab(lab, node_dirs, {"trixie": image}, accel, ports, saved)
    return json.dumps(dataclasses.asdict(plan), indent=2, sort_keys=True) + "\n"


@pytest.mark.parametrize(
    ("topology", "accel"),
    [("two-node.yaml", "tcg"), ("three-node-switch.yaml", "tcg"), ("two-node.yaml", "kvm"),
     ("routed.yaml", "tcg")],
)
def test_plan_matches_golden(topology: str, accel: str) -> None:
    golden = GOLDEN / f"qemu-plan-{Path(topology).stem}-{accel}.json"
    actual = _plan_json(topology, accel)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(actual)
    assert actual == golden.read_text()


@pytest.mark.parametrize("accel", ["tcg", "kvm"])
def test_restore_plan_matches_golden(accel: str) -> None:
    """A node restored from a saved machine: the cold argv plus the saved RAM file mapped
    copy on write, its identity port (ttyS1) and a wait for the saved state."""
    golden = GOLDEN / f"qemu-plan-two-node-restore-{accel}.json"
    actual = _plan_json("two-node.yaml", accel, restore=True)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(actual)
    assert actual == golden.read_text()


def test_restore_plan_is_the_cold_plan_plus_identity_port_and_state() -> None:
    cold = json.loads(_plan_json("two-node.yaml", "tcg"))
    restored = json.loads(_plan_json("two-node.yaml", "tcg", restore=True))
    assert len(restored["nodes"]) == len(cold["nodes"]) == 2
    for before, after in zip(cold["nodes"], restored["nodes"], strict=True):
        kept = len(before["argv"]) - 4  # the rest: -qmp and -pidfile, each with its value
        added = after["argv"][kept:-4]
        assert after["argv"][:kept] == before["argv"][:kept]
        assert after["argv"][-4:] == before["argv"][-4:]
        assert added[0:4] == [
            "-object", "memory-backend-file,id=ram,size=512M,"
            "mem-path=/cache/saved/trixie-0123456789abcdef/ram,share=off",
            "-machine", "memory-backend=ram"]
        assert added[4:6] == ["-chardev", "socket,id=identity,path=/labs/two-node/nodes/"
                              f"{before['node']}/identity.sock,server=on,wait=off"]
        assert added[6:8] == ["-serial", "chardev:identity"]
        assert added[8:] == ["-incoming", "defer"]  # the state comes over QMP
        assert after["env"] == before["env"] and after["taps"] == before["taps"]


def test_plan_keeps_management_on_loopback_with_restrict() -> None:
    plan = json.loads(_plan_json("three-node-switch.yaml", "tcg"))
    assert len(plan["nodes"]) == 3
    for node in plan["nodes"]:
        argv = node["argv"]
        user_netdevs = [a for a in argv if a.startswith("user,")]
        assert len(user_netdevs) == 1
        assert "restrict=on" in user_netdevs[0]
        assert "hostfwd=tcp:127.0.0.1:" in user_netdevs[0]
        # data NICs are taps handed over as fds: qemu never names a host interface
        assert all("ifname=" not in a for a in argv)


def test_switch_segment_has_one_bridge_and_a_tap_per_member() -> None:
    plan = json.loads(_plan_json("three-node-switch.yaml", "tcg"))
    assert plan["netns"].startswith("labctl-")
    bridges = {name for name, _mtu in plan["bridges"]}
    taps = [t for n in plan["nodes"] for t in n["taps"]]
    assert {t["bridge"] for t in taps} <= bridges
    assert len({t["name"] for t in taps}) == len(taps)
    assert all(len(t["name"]) <= 15 for t in taps)


def test_routed_plan_carries_forwarding_and_routes() -> None:
    plan = json.loads(_plan_json("routed.yaml", "tcg"))
    env = {n["node"]: n["env"] for n in plan["nodes"]}
    assert env["router"]["LABCTL_ROUTER"] == "1"
    assert "LABCTL_ROUTES" not in env["router"]  # on both segments: connected routes only
    assert env["node1"]["LABCTL_ROUTES"] == "10.77.2.0/24,10.77.1.1"
    assert env["node2"]["LABCTL_ROUTES"] == "10.77.1.0/24,10.77.2.1"
    assert "LABCTL_ROUTER" not in env["node1"]
    assert env["router"]["LABCTL_RDMA_DEV"] == ""  # rdma: none
    assert [len(n["taps"]) for n in plan["nodes"]] == [1, 1, 2]
