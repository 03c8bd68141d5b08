"""`labctl link show` (issue 34, item 4): each link end's state on the node's side and the
host's, and its netem.

The node's side is read in the node: tests/unit/outputs/links/node{1,2}.txt are what
`sh -c 'ip -j link show; echo; tc -j qdisc show'` printed in the nodes of a live qemu lab
(two-node, iproute2 6.15) after `labctl link set node1:eth1 down --delay 10ms --loss 5%`
and, in node2, `tc qdisc replace dev eth1 root netem delay 2.5ms 1ms rate 100mbit`. netem
runs in the node's kernel: the lab host needs no sch_netem (this one has none).

The host's side is real: a network namespace named as the lab's (labctl-ut-truth-...) with
veths named as the lab's taps, one with a carrier and one without, read by pyroute2 as
`link show` reads a qemu lab's taps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from labctl.lab import links
from labctl.lab.handle import LabHandle
from labctl.lab.links import netem_of, node_end
from labctl.net import labnet
from labctl.store.labdir import LabDir
from labctl.store.state import EngineState, LabState, NodeState, Phase
from labctl.topology.load import load_lab
from tests.unit.clirun import run_main
from tests.unit.jsonshape import parsed

REPO = Path(__file__).resolve().parents[2]
CAPTURED = Path(__file__).parent / "outputs" / "links"
LAB = "ut-truth-links"  # its netns: labctl-ut-truth-links
# A docker lab on a local engine: a netns of its own, so that no test of another worker
# sees it as LAB's (tests/unit runs in parallel).
LOCAL_LAB = "ut-truth-links-dl"


def _lab(topology: str = "two-node.yaml", provider: str = "qemu",
         engine: EngineState | None = None, name: str = LAB) -> LabDir:
    lab = dataclasses.replace(load_lab(REPO / "topologies" / topology), name=name,
                              provider=provider)
    labdir = LabDir(name)
    labdir.create(lab)
    labdir.save_state(LabState(provider=provider, phase=Phase.UP, engine=engine,
                               nodes={"node1": NodeState(ssh_port=2222)}))
    return labdir


Reply = Callable[[str], subprocess.CompletedProcess[str]]


def _sent(payload: str) -> str:
    return '{"labctl_reply": 1, "ok": true, "data": ' + payload + "}\n"


@pytest.fixture
def replies(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Reply]:
    """What each node answers to link show's command (default: the command itself, run
    here with `ip` and `tc` printing what they printed in the live node)."""
    answers: dict[str, Reply] = {}
    asked: list[list[str]] = []

    def captured(node: str) -> subprocess.CompletedProcess[str]:
        tools = tmp_path / node
        tools.mkdir(exist_ok=True)
        link_json, qdisc_json = (CAPTURED / f"{node}.txt").read_text().split("\n\n")
        for tool, printed in (("ip", link_json), ("tc", qdisc_json)):
            (tools / f"{tool}.json").write_text(printed)
            (tools / tool).write_text(f"#!/bin/sh\ncat '{tools / tool}.json'\n")
            (tools / tool).chmod(0o755)
        return subprocess.run(asked[-1], capture_output=True, text=True, timeout=30,
                              check=False, env={**os.environ, "PATH": f"{tools}:/usr/bin:/bin"})

    def run(self: LabHandle, node: str, command: list[str], *, timeout: float | None = None,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        asked.append(command)
        assert command == links._NODE_COMMAND
        return answers.get(node, captured)(node)

    monkeypatch.setattr(LabHandle, "run", run)
    return answers


@contextlib.contextmanager
def _netns_with(first: str, second: str, lab: str = LAB) -> Iterator[str]:
    """The lab's netns on this host: `first` up with a carrier (its peer up), `second` up
    without one (its peer down), as a lab's ends on its bridge."""
    from pyroute2 import IPRoute, netns

    name = labnet.netns_name(lab)
    if name in netns.listnetns():
        netns.remove(name)
    netns.create(name)
    try:
        with IPRoute(netns=name) as ipr:
            for end, peer, peer_up in ((first, "p1", True), (second, "p2", False)):
                ipr.link("add", ifname=end, kind="veth", peer=peer)
                ipr.link("set", index=ipr.link_lookup(ifname=end)[0], state="up")
                if peer_up:
                    ipr.link("set", index=ipr.link_lookup(ifname=peer)[0], state="up")
        yield name
    finally:
        netns.remove(name)


@pytest.fixture
def host_netns() -> Iterator[str]:
    """t1-eth1 with a carrier and t2-eth1 without, as a qemu lab's taps."""
    with _netns_with("t1-eth1", "t2-eth1") as name:
        yield name


def _show(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
          *args: str, lab: str = LAB) -> tuple[int, str, str]:
    code, out, err = run_main(monkeypatch, capsys, "link", "show", "--lab", lab, *args)
    assert "Traceback" not in out + err, err
    return code, out, " ".join(err.split())


def _ends(out: str) -> dict[str, dict[str, object]]:
    record = parsed("link-show", out)
    return {f"{e.node}:{e.interface}": dict(e) for link in record.links
            for e in link.ends}


def test_a_qemu_lab_with_a_pulled_cable_and_netem(
        state_root: Path, replies: dict[str, Reply], host_netns: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _lab()
    code, out, _ = _show(monkeypatch, capsys, "--json")
    assert code == 0
    ends = _ends(out)
    assert ends["node1:eth1"] == {
        "node": "node1", "interface": "eth1", "node_state": "down", "operstate": "DOWN",
        "qdisc": "netem", "reason": "", "host_interface": "t1-eth1", "host_state": "up",
        "netem": {"delay_ms": 10.0, "jitter_ms": 0.0, "loss_percent": 5.0, "rate_mbit": None}}
    assert ends["node2:eth1"]["node_state"] == "up"
    assert ends["node2:eth1"]["host_state"] == "down"  # its veth has no carrier
    assert ends["node2:eth1"]["netem"] == {"delay_ms": 2.5, "jitter_ms": 1.0,
                                           "loss_percent": None, "rate_mbit": 100.0}
    code, out, _ = _show(monkeypatch, capsys)
    text = " ".join(out.split())
    assert code == 0
    assert "node1:eth1 │ down │ t1-eth1 up │ delay 10ms loss 5%" in text
    assert "node2:eth1 │ up │ t2-eth1 down │ delay 2.5ms jitter 1ms rate 100mbit" in text


def test_without_the_labs_netns_the_host_side_is_absent_not_made(
        state_root: Path, replies: dict[str, Reply], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """IPRoute(netns=) creates a missing netns: link show must only look."""
    _lab()
    code, out, _ = _show(monkeypatch, capsys, "--json")
    assert code == 0
    assert {e["host_state"] for e in _ends(out).values()} == {None}
    assert not labnet.namespace_exists(labnet.netns_name(LAB))


def _answer(stdout: str, code: int = 0, stderr: str = "") -> Reply:
    return lambda node: subprocess.CompletedProcess([], code, stdout, stderr)


_LINKS_LINE = (CAPTURED / "node1.txt").read_text().splitlines()[0]
# A node is untrusted: what it answers may be anything. Each is its end's "?" (exit 1),
# never a traceback, and the other node's end is still shown. (The reply line's own
# checks are tests/unit/test_node_reply_format.py's.)
UNUSABLE: list[tuple[str, Reply, str]] = [
    ("ssh-fails", _answer("", 255, "ssh: connect to host 127.0.0.1 port 2222: refused"),
     "cannot read the links of node2: ssh: connect to host"),
    ("timeout", _answer("", 124, ""), "cannot read the links of node2: exit 124"),
    ("the old two documents", _answer(_LINKS_LINE + "\n\n[]\n"),
     "node2 sent an unreadable reply (a JSON list, not an object)"),
    ("links only", _answer(_sent('{"links": ' + _LINKS_LINE + "}")), "not two JSON lists"),
    ("not-json", _answer("<html>\nhello\n"), "node2 sent an unreadable reply"),
    ("objects", _answer(_sent('{"links": {}, "qdiscs": {}}')), "not two JSON lists"),
    ("a list", _answer(_sent("[[], []]")), "not two JSON lists"),
    ("nan", _answer(_sent('{"links": [NaN], "qdiscs": []}')), "node2 sent an unreadable reply"),
    ("deep", _answer(_sent('{"links": ' + "[" * 100_000 + "]" * 100_000 + ', "qdiscs": []}')),
     "node2 sent an unreadable"),
    ("its error", _answer('{"labctl_reply": 1, "ok": false, "error": "no tc"}\n', 1),
     "cannot read the links of node2: no tc"),
]


@pytest.mark.parametrize(("kind", "reply", "reason"), UNUSABLE, ids=[u[0] for u in UNUSABLE])
def test_a_node_that_cannot_say(kind: str, reply: Reply, reason: str, state_root: Path,
                                replies: dict[str, Reply], monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    _lab()
    replies["node2"] = reply
    code, out, _ = _show(monkeypatch, capsys, "--json")
    assert code == 1
    ends = _ends(out)
    assert ends["node2:eth1"]["node_state"] == "?"
    assert reason in str(ends["node2:eth1"]["reason"])
    assert ends["node1:eth1"]["node_state"] == "down"
    code, out, _ = _show(monkeypatch, capsys)
    assert code == 1 and "node2:eth1" in out


# Records a node may send that are lists, but not of what `ip`/`tc` print: each field is
# type-checked, so a wrong type reads as "not set", never as a crash or a made-up figure.
ODD_RECORDS: list[tuple[str, str, str, tuple[str, str]]] = [
    ("flags-not-list", '[{"ifname": "eth1", "flags": "UP LOWER_UP", "operstate": "UP"}]',
     "[]", ("down", "UP")),
    ("operstate-number", '[{"ifname": "eth1", "flags": ["UP", "LOWER_UP"], "operstate": 1}]',
     "[]", ("down", "")),
    ("no-eth1", '[{"ifname": "eth9", "flags": ["UP", "LOWER_UP"], "operstate": "UP"}]',
     "[]", ("absent", "")),
    ("items-not-objects", '[1, "eth1", null]', "[1, null]", ("absent", "")),
]


@pytest.mark.parametrize(("kind", "links", "qdiscs", "expected"), ODD_RECORDS,
                         ids=[o[0] for o in ODD_RECORDS])
def test_odd_records_are_read_field_by_field(kind: str, links: str, qdiscs: str,
                                             expected: tuple[str, str]) -> None:
    assert node_end(json.loads(links), "eth1") == expected
    assert netem_of(json.loads(qdiscs), "eth1") == ("", None)


@pytest.mark.parametrize(("options", "netem"), [
    ('{"delay": {"delay": "10ms"}, "loss-random": {"loss": true}}',
     {"delay_ms": None, "jitter_ms": None, "loss_percent": None, "rate_mbit": None}),
    ('{"delay": [], "rate": {"rate": 1e400}}',  # 1e400: inf, never a figure
     {"delay_ms": None, "jitter_ms": None, "loss_percent": None, "rate_mbit": None}),
    ('"netem"', {"delay_ms": None, "jitter_ms": None, "loss_percent": None, "rate_mbit": None}),
])
def test_odd_netem_options(options: str, netem: dict[str, float | None]) -> None:
    qdiscs = json.loads(f'[{{"kind": "netem", "dev": "eth1", "root": true, "options": '
                        f'{options}}}]')
    assert netem_of(qdiscs, "eth1") == ("netem", netem)


def test_a_docker_lab_shows_the_node_side(
        state_root: Path, replies: dict[str, Reply], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Its veths are in the engine's host (the Docker host VM): not read from here."""
    _lab("docker-two-node.yaml", "docker", EngineState("vm", "unix:///run/labctl/docker.sock"))
    code, out, _ = _show(monkeypatch, capsys, "--json")
    assert code == 0
    ends = _ends(out)
    assert ends["node1:eth1"]["host_interface"] == "v1-eth1"
    assert ends["node1:eth1"]["host_state"] is None
    assert ends["node1:eth1"]["node_state"] == "down"
    code, out, _ = _show(monkeypatch, capsys)
    assert "v1-eth1 not read (engine host)" in " ".join(out.split())


def test_a_docker_lab_on_a_local_engine_shows_its_veths_here(
        state_root: Path, replies: dict[str, Reply], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A local engine's containers share this host's kernel: their veths are read here."""
    _lab("docker-two-node.yaml", "docker", EngineState("local", "unix:///var/run/docker.sock"),
         name=LOCAL_LAB)
    with _netns_with("v1-eth1", "v2-eth1", LOCAL_LAB):
        code, out, _ = _show(monkeypatch, capsys, "--json", lab=LOCAL_LAB)
    assert code == 0
    ends = _ends(out)
    assert (ends["node1:eth1"]["host_interface"], ends["node1:eth1"]["host_state"]) == (
        "v1-eth1", "up")
    assert (ends["node2:eth1"]["host_interface"], ends["node2:eth1"]["host_state"]) == (
        "v2-eth1", "down")


@pytest.mark.parametrize(("topology", "provider", "message"), [
    ("two-node.yaml", "vagrant", "link show is not supported for vagrant labs: their links "
     "are the hypervisor's own networks"),
    ("multi-host.yaml", "docker", "link show is not supported for multi-host docker labs: "
     "their links are the swarm's overlay networks"),
])
def test_labs_whose_links_labctl_does_not_change_are_refused(
        topology: str, provider: str, message: str, state_root: Path,
        replies: dict[str, Reply], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _lab(topology, provider)
    replies.update({n: _answer("", 1, "never asked") for n in ("node1", "node2")})
    code, out, err = _show(monkeypatch, capsys)
    assert code == 2 and out == ""
    assert message in err and "hint:" in err
