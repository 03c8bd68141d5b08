"""labctl fault: the spec parser's refusals, the eBPF gate's code, the tc scripts, the
counters' parsing, and add's all-or-nothing against a fake lab."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from labctl import capabilities
from labctl.errors import LabctlError, UsageError
from labctl.lab import counters
from labctl.node.ready import NodeRuntime
from labctl.nodeside import faultgate, reply
from labctl.providers.base import UnsupportedError
from labctl.rdmafault import apply, tcplan
from labctl.rdmafault.fault_spec import FaultSpec, build_spec, parse_opcodes, parse_psn
from labctl.store.state import NodeStatus


def spec(action: str = "drop", **kwargs: Any) -> FaultSpec:
    args: dict[str, Any] = {"opcodes": [], "qp": None, "psn": None, "tcp": False,
                            "tcp_port": None, "nth": None, "every": None, "count": None,
                            "skip": None, "probability": None, "delay": None}
    return build_spec(action, **{**args, **kwargs})


# --- spec ----------------------------------------------------------------------------------
def test_opcode_classes_come_from_the_decoders_table() -> None:
    assert parse_opcodes(["ack"]) == [0x11, 0x51]  # RC and RD ACKNOWLEDGE, not atomic's
    assert parse_opcodes(["read-response"])[:4] == [0x0D, 0x0E, 0x0F, 0x10]
    assert parse_opcodes(["RC_SEND_ONLY", "0x0c"]) == [0x04, 0x0C]
    assert 0x16 in parse_opcodes(["send"])  # send with invalidate, named by roce.py


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"opcodes": ["bogus"]}, "unknown opcode"),
    ({"opcodes": ["0x99"]}, "unknown opcode"),
    ({"psn": "0x1000000"}, "bad PSN"),
    ({"psn": "-1"}, "bad PSN"),
    ({"psn": "200-100"}, "bad PSN range"),
    ({"qp": "16777216"}, "bad QP"),
    ({"probability": "0"}, "bad --probability"),
    ({"probability": "150%"}, "bad --probability"),
    ({"count": 0}, "bad --count"),
    ({"nth": 2, "count": 3}, "--nth is one packet"),
    ({"tcp": True, "opcodes": ["send"]}, "match RoCE v2 headers"),
    ({"tcp_port": 70000}, "bad --port"),
    ({"delay": "5ms"}, "--delay goes with delay or reorder"),
])
def test_bad_input_is_refused(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(UsageError, match=words) as info:
        spec(**kwargs)
    assert info.value.exit_code == 2 and info.value.hint


def test_unknown_action_and_bad_delay() -> None:
    with pytest.raises(UsageError, match="unknown fault action"):
        spec("explode")
    with pytest.raises(UsageError, match="bad --delay"):
        spec("delay", delay="61s")
    assert spec("delay").delay == "10ms" and spec("reorder", delay="2ms").delay == "2ms"


def test_nth_is_a_window_of_one_and_psn_a_range() -> None:
    third = spec(nth=3, opcodes=["ack"])
    assert (third.skip, third.count) == (2, 1)
    assert parse_psn("0x10-0x20") == (16, 32) and parse_psn("7") == (7, 7)
    assert third.describe() == "drop ack after 2 count=1"


def test_gate_words_carry_every_field() -> None:
    words = spec(opcodes=["ack"], qp="0x11", psn="5-9", count=3, probability="50%",
                 every=2).gate_words()
    assert words == ["opcodes=17,81", "bth=1", "qp=17", "psn_lo=5", "psn_hi=9", "every=2",
                     "skip=0", "count=3", f"threshold={2**31 - 1}"]
    assert spec(tcp_port=7174).gate_words()[1] == "bth=0"


def test_spec_round_trips_through_json() -> None:
    original = spec(psn="1-2", opcodes=["write"], probability="0.25")
    assert FaultSpec.from_json(json.loads(json.dumps(original.to_json()))) == original


# --- the gate program ----------------------------------------------------------------------
def _decode(code: bytes) -> list[tuple[int, int, int, int, int]]:
    out = []
    for i in range(0, len(code), 8):
        op, regs, off, imm = struct.unpack("<BBhi", code[i:i + 8])
        out.append((op, regs & 0xF, regs >> 4, off, imm))
    return out


def test_gate_program_jumps_land_inside_and_it_ends_in_exits() -> None:
    opcodes, values = faultgate.parse_spec(spec(opcodes=["ack"], qp="5", psn="1-9", count=3,
                                                every=2, probability="10%").gate_words())
    insns = _decode(faultgate.gate_program(7, opcodes, values))
    for pc, (op, _, _, off, _) in enumerate(insns):
        if op & 0x07 == 0x05 and op not in (0x85, 0x95):  # a jump
            assert 0 <= pc + 1 + off < len(insns), pc
    assert insns[-1][0] == 0x95 and insns[-2] == (0xB7, 0, 0, 0, -1)  # miss: TC_ACT_UNSPEC
    assert (0x18, 1, 1, 0, 7) in insns  # the map fd, as BPF_PSEUDO_MAP_FD
    helpers = [imm for op, _, _, _, imm in insns if op == 0x85]
    assert helpers == [26, 1, 7]  # skb_load_bytes, map_lookup_elem, get_prandom_u32
    assert (0x15, 7, 0, insns[[i[4] for i in insns].index(17)][3], 17) in insns  # ACK


def test_gate_program_without_bth_reads_no_packet() -> None:
    opcodes, values = faultgate.parse_spec(spec(tcp=True).gate_words())
    helpers = [i[4] for i in _decode(faultgate.gate_program(3, opcodes, values))
               if i[0] == 0x85]
    assert helpers == [1]  # only the counter


def test_gate_spec_refuses_unknown_or_missing_keys() -> None:
    with pytest.raises(SystemExit, match="unknown key"):
        faultgate.parse_spec(["x=1"])
    with pytest.raises(SystemExit, match="missing"):
        faultgate.parse_spec(["bth=1"])


# --- tc -----------------------------------------------------------------------------------
def test_drop_script_builds_the_root_band_and_gated_filter() -> None:
    script = tcplan.install_script("eth1", 2, 4, spec(opcodes=["send"], count=1))
    assert "prio bands 16 priomap" in script and "set -e" in script
    assert "tc qdisc replace dev eth1 parent 1:2 handle 102: netem loss 100%" in script
    assert ("match ip dport 4791 0xffff flowid 1:2 action bpf object-pinned "
            "/sys/fs/bpf/labctl-fault/f4/prog continue") in script


def test_roce_corrupt_inverts_the_psn_byte_and_tcp_one_uses_netem() -> None:
    (roce,) = tcplan.filter_commands("eth1", 3, 1, spec("corrupt"))
    assert roce[roce.index("flowid") + 1] == "1:1"
    assert roce[-10:] == ["pedit", "munge", "offset", "39", "u8", "invert", "pipe", "action",
                          "csum", "udp"]
    assert tcplan.netem_args(spec("corrupt", tcp=True)) == ["corrupt", "100%"]
    both = tcplan.filter_commands("eth1", 3, 1, spec("drop", tcp_port=7174))
    assert [c[c.index("flowid") - 3] for c in both] == ["dport", "sport"]


def test_a_hostile_interface_name_is_quoted() -> None:
    script = tcplan.install_script("eth1;reboot", 2, 1, spec())
    assert "dev 'eth1;reboot'" in script and "dev eth1;reboot" not in script


def test_remove_script_drops_the_root_with_the_last_fault_only() -> None:
    assert "root" not in tcplan.remove_script("eth1", 2, last_on_interface=False)
    assert "tc qdisc del dev eth1 root" in tcplan.remove_script("eth1", 2, True)


# --- counters -----------------------------------------------------------------------------
def test_counters_parse_untrusted_replies() -> None:
    reply = [{"ifname": "rxe0", "port": 1, "rcvd_seq_err": 3, "bad": -1, "flag": True},
             {"ifname": 5}, "junk"]
    assert counters.parse_rdma(reply) == {"rxe0/1": {"rcvd_seq_err": 3}}
    assert counters.parse_rdma({"not": "a list"}) == {}
    tcp = counters.parse_snmp_tcp(["Tcp: RtoMin RetransSegs InSegs", "Tcp: 200 7 x"])
    assert tcp == {"RetransSegs": 7}
    assert counters.parse_snmp_tcp(["Tcp: one line"]) == {}


class _CountingNode:
    """A handle whose node answers the counters command with two nodes' rxe devices (what
    a container sees of the engine's kernel in shared netns mode) and a Tcp: pair."""

    def __init__(self, caps: capabilities.Capabilities) -> None:
        self.provider = type("P", (), {"capabilities": caps})()

    def run_in_netns(self, node: str, command: list[str],
                     timeout: float) -> subprocess.CompletedProcess[str]:
        ports = [{"ifname": f"rxe_lab_{n}", "port": 1, "rcvd_seq_err": i}
                 for i, n in enumerate(("node1", "node2"))]
        out = reply.line({"rdma": ports, "tcp": ["Tcp RetransSegs InSegs", "Tcp 1 2"]})
        return subprocess.CompletedProcess(command, 0, out + "\n", "")

    def node_state(self, node: str) -> Any:
        return type("S", (), {"rdma_dev": f"rxe_lab_{node}"})()


@pytest.mark.parametrize(("caps", "ports"), [
    (capabilities.DOCKER, ["rxe_lab_node2/1"]),  # the engine's kernel: the node's own only
    (capabilities.SWARM, ["rxe_lab_node2/1"]),
    (capabilities.QEMU, ["rxe_lab_node1/1", "rxe_lab_node2/1"]),  # its own kernel: all
])
def test_a_container_nodes_counters_are_its_own_devices(caps: capabilities.Capabilities,
                                                        ports: list[str]) -> None:
    read = counters.read_counters(_CountingNode(caps), "node2")  # type: ignore[arg-type]
    assert sorted(read) == [*ports, "tcp"]
    assert read["tcp"] == {"RetransSegs": 1, "InSegs": 2}


def test_counter_delta_and_changed() -> None:
    before = {"rxe0/1": {"a": 1, "b": 5}, "tcp": {"RetransSegs": 2}}
    after = {"rxe0/1": {"a": 4, "b": 5, "new": 9}, "tcp": {"RetransSegs": 2}}
    change = counters.delta(before, after)
    assert change == {"rxe0/1": {"a": 3, "b": 0}, "tcp": {"RetransSegs": 0}}
    assert counters.changed(change) == {"rxe0/1": {"a": 3}}
    assert counters.delta(None, after) is None


# --- add, list, clear against a fake lab ---------------------------------------------------
class FakeProvider:
    def __init__(self, state: NodeStatus, provider: str) -> None:
        self.state = state
        self.capabilities = capabilities.for_provider(provider)

    def nodes(self) -> list[NodeRuntime]:
        return [NodeRuntime("node1", self.state), NodeRuntime("node2", self.state)]


class FakeNode:
    def __init__(self, name: str) -> None:
        self.name = name
        self.interfaces = [FakeNode("eth1")] if name.startswith("node") else []


class FakeLab:
    def __init__(self, provider: str) -> None:
        self.name, self.provider = "lab1", provider
        self.nodes = [FakeNode("node1"), FakeNode("node2")]

    def node(self, name: str) -> FakeNode:
        return next(n for n in self.nodes if n.name == name)


class FakeLabDir:
    def __init__(self, path: Path) -> None:
        self.path = path


class FakeHandle:
    """Answers the gate and the tc scripts; `tc_exit` is what the install script exits."""

    def __init__(self, tmp_path: Path, *, provider: str = "qemu",
                 state: NodeStatus = NodeStatus.RUNNING, tc_exit: int = 0) -> None:
        self.lab, self.labdir = FakeLab(provider), FakeLabDir(tmp_path)
        self.provider = FakeProvider(state, provider)
        self.tc_exit = tc_exit
        self.calls: list[list[str]] = []

    def node_names(self) -> list[str]:
        return [n.name for n in self.lab.nodes]

    def run(self, node: str, command: list[str], *, timeout: float | None = None,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        self.calls.append(command)
        if command[:2] == ["python3", "-"]:
            assert input and "gate_program" in input  # the gate's own source
            answer = {"load": {"prog": "p"}, "remove": {},
                      "read": {n: [9, 2] for n in command[3:]}}[command[2]]
            return subprocess.CompletedProcess(command, 0, reply.line(answer) + "\n", "")
        install = "set -e" in command[-1]
        code = self.tc_exit if install else 0
        return subprocess.CompletedProcess(command, code, "", "" if code == 0 else "RTNETLINK")

    def run_in_netns(self, node: str, command: list[str], *,
                     timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        return self.run(node, command, timeout=timeout)  # the counters: a qemu node's way


def _add(handle: FakeHandle, node: str = "node2") -> apply.Fault:
    return apply.add_fault(handle, node, "eth1", spec(opcodes=["ack"], count=3))  # type: ignore[arg-type]


def test_add_list_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    handle = FakeHandle(tmp_path)
    first, second = _add(handle), _add(handle)
    assert (first.id, first.band, second.id, second.band) == (1, 2, 2, 3)
    assert apply.fault_counts(handle, apply.load_faults(handle)) == {1: [9, 2], 2: [9, 2]}  # type: ignore[arg-type]
    handle.calls.clear()
    removed = apply.clear_faults(handle, fault_id=1)  # type: ignore[arg-type]
    assert [f.id for f in removed] == [1]
    assert "root" not in handle.calls[0][-1]  # fault 2 still needs the root prio
    apply.clear_faults(handle)  # type: ignore[arg-type]
    assert "tc qdisc del dev eth1 root" in handle.calls[-2][-1]
    assert apply.load_faults(handle) == []  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="no fault 7"):
        apply.clear_faults(handle, fault_id=7)  # type: ignore[arg-type]


def test_two_adds_at_once_get_their_own_ids_and_bands(tmp_path: Path) -> None:
    """faults.json is read, changed and written under the lab's faults lock: two adds that
    run at once (the first one's tc script waits until the second has started) both land."""
    handle = FakeHandle(tmp_path)
    second_started = threading.Event()
    real_run = handle.run

    def slow_run(node: str, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if "set -e" in command[-1] and not second_started.is_set():
            second_started.wait(timeout=0.5)  # the second add is blocked on the lock meanwhile
        return real_run(node, command, **kwargs)

    handle.run = slow_run  # type: ignore[method-assign]
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(_add, handle, "node1")
        time.sleep(0.1)
        second = pool.submit(_add, handle, "node1")
        time.sleep(0.1)
        second_started.set()
        added = sorted([first.result(timeout=10), second.result(timeout=10)],
                       key=lambda f: f.id)
    assert [(f.id, f.band) for f in added] == [(1, 2), (2, 3)]
    assert [f.id for f in apply.load_faults(handle)] == [1, 2]  # type: ignore[arg-type]


def test_a_failed_tc_takes_off_what_was_put_on(tmp_path: Path) -> None:
    handle = FakeHandle(tmp_path, tc_exit=2)
    with pytest.raises(LabctlError, match="tc in node2 refused") as info:
        _add(handle)
    assert info.value.exit_code == 1
    assert handle.calls[-1][2:4] == ["remove", "f1"]  # the pinned gate removed again
    assert "tc filter del dev eth1 parent 1: prio 2" in handle.calls[-2][-1]
    assert apply.load_faults(handle) == []  # type: ignore[arg-type]


def test_link_netem_on_the_root_is_bad_input(tmp_path: Path) -> None:
    handle = FakeHandle(tmp_path, tc_exit=tcplan.ROOT_IS_NETEM_EXIT)
    with pytest.raises(UsageError, match="link set") as info:
        _add(handle)
    assert "--clear" in str(info.value.hint)


def test_stopped_node_and_docker_are_refused_before_anything_runs(tmp_path: Path) -> None:
    stopped = FakeHandle(tmp_path, state=NodeStatus.STOPPED)
    with pytest.raises(UsageError, match="node2 of lab lab1 is stopped"):
        _add(stopped)
    docker = FakeHandle(tmp_path, provider="docker")
    with pytest.raises(UnsupportedError, match=r"on docker labs: .* NET_ADMIN only") as info:
        _add(docker)
    assert info.value.exit_code == 2
    assert stopped.calls == [] and docker.calls == []


def test_a_band_per_fault_at_most_fifteen(tmp_path: Path) -> None:
    handle = FakeHandle(tmp_path)
    for _ in range(15):
        _add(handle)
    with pytest.raises(UsageError, match="15 faults"):
        _add(handle)
    assert _add(handle, "node1").band == 2  # another link end has bands of its own


# --- the pytest plugin's context manager ----------------------------------------------------
def test_injected_fault_is_taken_off_even_when_the_block_fails(tmp_path: Path) -> None:
    from labctl.pytest_plugin.faults import injected_fault

    handle = FakeHandle(tmp_path)
    with pytest.raises(RuntimeError, match="the test failed"), \
            injected_fault(handle, "node2:eth1", "drop", opcodes=["ack"],  # type: ignore[arg-type]
                           count=3) as fault:
        assert fault.hits() == (9, 2)
        assert fault.counter_changes() == {"node1": None, "node2": None}  # fake: unread
        assert [f.id for f in apply.load_faults(handle)] == [1]  # type: ignore[arg-type]
        raise RuntimeError("the test failed")
    assert apply.load_faults(handle) == []  # type: ignore[arg-type]
    assert handle.calls[-1][2:4] == ["remove", "f1"]


def test_injected_fault_refuses_bad_input_before_anything_is_on(tmp_path: Path) -> None:
    from labctl.pytest_plugin.faults import injected_fault

    handle = FakeHandle(tmp_path)
    with pytest.raises(TypeError, match="unknown fault options: opcode"), \
            injected_fault(handle, "node2:eth1", "drop", opcode="ack"):  # type: ignore[arg-type]
        pass
    with pytest.raises(UsageError, match="no data interface"), \
            injected_fault(handle, "node2:eth7", "drop"):  # type: ignore[arg-type]
        pass
    assert handle.calls == []


def test_a_fault_whose_node_does_not_answer_is_kept(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    handle = FakeHandle(tmp_path)
    _add(handle, "node1")
    _add(handle, "node2")
    real_run = handle.run

    def node2_gone(node: str, command: list[str], **kwargs: Any) -> Any:
        if node == "node2":
            return subprocess.CompletedProcess(command, 255, "", "ssh: connect refused")
        return real_run(node, command, **kwargs)

    monkeypatch.setattr(handle, "run", node2_gone)
    with pytest.raises(LabctlError, match="could not remove fault") as info:
        apply.clear_faults(handle)  # type: ignore[arg-type]
    assert "labctl down" in str(info.value.hint)
    assert [(f.id, f.node) for f in apply.load_faults(handle)] == [(2, "node2")]  # type: ignore[arg-type]
    assert apply.fault_counts(handle, apply.load_faults(handle)) == {2: None}  # type: ignore[arg-type]


# --- faults.json is data from the lab directory ---------------------------------------------
def _recorded(handle: FakeHandle) -> dict[str, Any]:
    _add(handle)
    record: dict[str, Any] = json.loads((handle.labdir.path / apply.FAULTS_FILE).read_text())
    return record


@pytest.mark.parametrize(("change", "why"), [
    (lambda f: f.update(node="../../etc"), "a node the lab does not have"),
    (lambda f: f.update(interface="eth1; reboot"), "an interface node2 does not have"),
    (lambda f: f.update(band=99), "band"),
    (lambda f: f.update(id=True), "id"),
    (lambda f: f["spec"].update(delay="1ms; reboot"), "bad spec delay"),
    (lambda f: f["spec"].update(opcodes=["0x11"]), "bad spec opcodes"),
    (lambda f: f["spec"].update(count=-1), "bad spec count"),
    (lambda f: f["spec"].update(psn=[5, 1]), "bad spec psn"),
    (lambda f: f["spec"].update(extra=1), "does not have the fields"),
    (lambda f: f["spec"].update(probability=float("nan")), "NaN"),
    (lambda f: f["spec"].update(probability=2), "bad spec probability"),
])
def test_a_tampered_faults_file_is_refused(tmp_path: Path, change: Any, why: str) -> None:
    handle = FakeHandle(tmp_path)
    record = _recorded(handle)
    change(record["faults"][0])
    (handle.labdir.path / apply.FAULTS_FILE).write_text(json.dumps(record))
    with pytest.raises(LabctlError) as info:
        apply.load_faults(handle)  # type: ignore[arg-type]
    assert why in info.value.message and "labctl down" in (info.value.hint or "")


def test_a_faults_file_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    handle = FakeHandle(tmp_path)
    (tmp_path / apply.FAULTS_FILE).symlink_to("/etc/passwd")
    with pytest.raises(LabctlError) as info:
        apply.load_faults(handle)  # type: ignore[arg-type]
    assert "symlink" in info.value.message or "link" in info.value.message


def test_a_recorded_fault_reads_back_as_it_was(tmp_path: Path) -> None:
    handle = FakeHandle(tmp_path)
    added = _add(handle)
    assert apply.load_faults(handle) == [added]  # type: ignore[arg-type]


def test_a_faults_file_that_is_a_socket_is_an_error_with_a_hint(tmp_path: Path) -> None:
    """open() of a socket is ENXIO (an OSError, once a traceback)."""
    handle = FakeHandle(tmp_path)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / apply.FAULTS_FILE))
        with pytest.raises(LabctlError) as info:
            apply.load_faults(handle)  # type: ignore[arg-type]
    assert "socket" in info.value.message and "labctl down" in (info.value.hint or "")


def _many_faults(handle: FakeHandle, count: int, *, band: int | None = None) -> None:
    record = _recorded(handle)
    one = record["faults"][0]
    record["faults"] = [dict(one, id=i + 1, node=f"node{1 + i % 2}",
                             band=band or 2 + (i // 2) % 15) for i in range(count)]
    (handle.labdir.path / apply.FAULTS_FILE).write_text(json.dumps(record))


def test_clear_takes_a_nodes_faults_off_in_two_node_commands(tmp_path: Path) -> None:
    """30 faults (every band of eth1 on both nodes): 4 node commands, not 60."""
    handle = FakeHandle(tmp_path)
    _many_faults(handle, 30)
    handle.calls.clear()
    removed = apply.clear_faults(handle)  # type: ignore[arg-type]
    assert len(removed) == 30 and apply.load_faults(handle) == []  # type: ignore[arg-type]
    assert len(handle.calls) == 4
    scripts = [c[-1] for c in handle.calls if c[:2] == ["sh", "-c"]]
    assert [s.count("tc filter del") for s in scripts] == [15, 15]
    assert all(s.count("tc qdisc del dev eth1 root") == 1 for s in scripts)  # once, last
    gates = [c for c in handle.calls if c[:2] == ["python3", "-"]]
    assert sorted(len(g) - 3 for g in gates) == [15, 15]  # every pin of the node at once


def test_clear_keeps_the_faults_of_a_node_whose_script_fails(tmp_path: Path) -> None:
    handle = FakeHandle(tmp_path)
    _many_faults(handle, 4)
    real_run = handle.run

    def run(node: str, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if node == "node2" and command[:2] == ["sh", "-c"]:
            return subprocess.CompletedProcess(command, 255, "", "no answer")
        return real_run(node, command, **kwargs)

    handle.run = run  # type: ignore[method-assign]
    with pytest.raises(LabctlError, match=r"could not remove fault\(s\) 2, 4"):
        apply.clear_faults(handle)  # type: ignore[arg-type]
    assert [f.id for f in apply.load_faults(handle)] == [2, 4]  # type: ignore[arg-type]


@pytest.mark.parametrize(("count", "band", "why"), [
    (apply.MAX_FAULTS + 1, None, f"{apply.MAX_FAULTS + 1} faults (labctl records at most"),
    (3, 5, "two faults share an id or a band"),  # node1 eth1 band 5 twice
])
def test_a_faults_file_labctl_cannot_have_written_is_refused(
        tmp_path: Path, count: int, band: int | None, why: str) -> None:
    handle = FakeHandle(tmp_path)
    _many_faults(handle, count, band=band)
    handle.calls.clear()
    with pytest.raises(LabctlError) as info:
        apply.clear_faults(handle)  # type: ignore[arg-type]
    assert why in info.value.message and handle.calls == []  # nothing sent to a node
