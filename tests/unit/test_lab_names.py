"""Lab names and re-runs (issue 34, item 1): `up --name`, `up` of a lab that is up (same
topology: left as it is; changed: the differences, exit 2; `--recreate`), and per-node
`stop`/`start`/`restart`. Labs here are lab directories in a tmp state dir with a provider
that records what it is asked (no VM); the qemu provider's own stop is tried on real
processes."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

import pytest

import labctl.lab.handle as handle_module
import labctl.lab.lifecycle as lifecycle
from labctl.capabilities import QEMU
from labctl.errors import LabctlError, UsageError
from labctl.node.ready import NodeRuntime
from labctl.progress import Progress
from labctl.providers.base import Provider
from labctl.providers.qemu import QemuProvider
from labctl.store.labdir import LabDir
from labctl.store.state import LabState, NodeState, NodeStatus, Phase
from labctl.store.state_recorder import StateRecorder
from labctl.topology.compare import lab_changes
from labctl.topology.load import load_lab
from labctl.topology.resolved import Lab
from tests.unit.clirun import run_main

TWO_NODE = """\
name: ut-names
nodes:
  node1: {}
  node2: {}
links:
  - endpoints: [node1:eth1, node2:eth1]
"""


def _lab(tmp_path: Path, text: str = TWO_NODE, file: str = "t.yaml") -> Lab:
    topo = tmp_path / file
    topo.write_text(text)
    return load_lab(topo)


# --------------------------------------------------------------------------- comparison

# (topology text, the lines lab_changes gives against TWO_NODE)
CHANGED: list[tuple[str, list[str]]] = [
    (TWO_NODE, []),
    (TWO_NODE.replace("  node2: {}\n", "  node2: {}\n  node3: {rdma: none}\n"),
     ["node node3 added"]),
    (TWO_NODE.replace("  node2: {}\n", "  node2: {memory: 1024}\n"),
     ["node node2: memory_mib 512 → 1024"]),
    (TWO_NODE.replace("  node2: {}\n", "  node2: {rdma: siw}\n"),
     ["node node2: rdma 'rxe' → 'siw'"]),
    (TWO_NODE + "    mtu: 9000\n",
     ["node node1: interface eth1: mtu 1500 → 9000",
      "node node2: interface eth1: mtu 1500 → 9000", "link link1: mtu 1500 → 9000"]),
    (TWO_NODE.replace("node2:eth1]", "node2:eth2]"),
     ["node node2: interface eth1 removed", "node node2: interface eth2 added",
      "link link1: endpoints ['node1:eth1', 'node2:eth1'] → ['node1:eth1', 'node2:eth2']"]),
    (TWO_NODE + "    subnet: 10.9.9.0/24\n",
     ["node node1: interface eth1: ipv4 '10.77.1.1/24' → '10.9.9.1/24'",
      "node node2: interface eth1: ipv4 '10.77.1.2/24' → '10.9.9.2/24'",
      "link link1: subnet '10.77.1.0/24' → '10.9.9.0/24'"]),
]


@pytest.mark.parametrize(("text", "expected"), CHANGED)
def test_lab_changes_lists_each_difference(tmp_path: Path, text: str,
                                           expected: list[str]) -> None:
    old = _lab(tmp_path)
    (tmp_path / "new").mkdir()
    new = _lab(tmp_path / "new", text)
    assert lab_changes(old, new) == expected


def test_a_removed_node_and_a_changed_provider_are_named(tmp_path: Path) -> None:
    old = _lab(tmp_path)
    new = dataclasses.replace(old, provider="docker", nodes=old.nodes[:1],
                              provider_options={"accel": "tcg"})
    assert lab_changes(old, new)[:3] == ["provider: qemu → docker",
                                         "provider option accel: none → 'tcg'",
                                         "node node2 removed"]


def test_the_source_path_is_not_a_change(tmp_path: Path) -> None:
    old = _lab(tmp_path)
    assert lab_changes(old, dataclasses.replace(old, source="/elsewhere/t.yaml")) == []


def test_reordered_nodes_show_their_new_macs(tmp_path: Path) -> None:
    old = _lab(tmp_path)
    swapped = TWO_NODE.replace("  node1: {}\n  node2: {}\n", "  node2: {}\n  node1: {}\n")
    (tmp_path / "new").mkdir()
    changes = lab_changes(old, _lab(tmp_path / "new", swapped))
    assert changes and all(": interface eth1: mac '02:" in line for line in changes)


# --------------------------------------------------------------------------- fake labs


class RecordingProvider(Provider):
    """A provider whose nodes are entries of a dict: each call is recorded, and stop and
    repair change the entries as the real ones change the processes."""

    name = "qemu"
    capabilities = QEMU
    states: ClassVar[dict[str, NodeStatus]] = {}  # replaced per test by the fixture
    calls: ClassVar[list[str]] = []

    def check_host(self) -> None:
        self.calls.append("check_host")

    def create(self, record: StateRecorder, progress: Progress) -> None:
        self.calls.append("create")
        for node in self.lab.nodes:
            self.states[node.name] = NodeStatus.RUNNING
            record.node(node.name, NodeState())

    def wait_ready(self, state: LabState, timeout: float, progress: Progress,
                   nodes: list[str] | None = None) -> None:
        self.calls.append(f"wait_ready {nodes}")

    def nodes(self) -> list[NodeRuntime]:
        return [NodeRuntime(n.name, self.states.get(n.name, NodeStatus.ABSENT))
                for n in self.lab.nodes]

    def stop_node(self, node: str) -> None:
        self.calls.append(f"stop {node}")
        self.states[node] = NodeStatus.STOPPED

    def repair(self, record: StateRecorder, nodes: list[str], progress: Progress) -> None:
        self.calls.append(f"repair {nodes}")
        self.states.update(dict.fromkeys(nodes, NodeStatus.RUNNING))

    def destroy(self) -> list[str]:
        self.calls.append("destroy")
        self.states.clear()
        return ["nodes"]

    def exec_argv(self, node: str, command: list[str], *, tty: bool = False) -> list[str]:
        raise AssertionError("no command runs in a fake lab")


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> type[RecordingProvider]:
    """A tmp state dir whose labs' providers are RecordingProvider (fresh per test)."""
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "labs"))
    monkeypatch.setattr(RecordingProvider, "states", {})
    monkeypatch.setattr(RecordingProvider, "calls", [])
    monkeypatch.setattr(lifecycle, "provider_for", RecordingProvider)
    monkeypatch.setattr(handle_module, "provider_for", RecordingProvider)
    monkeypatch.setattr("labctl.net.labnet.delete_netns", lambda _ns, _owner=None: False)
    return RecordingProvider


def _topology(tmp_path: Path, text: str = TWO_NODE) -> Path:
    topo = tmp_path / "t.yaml"
    topo.write_text(text)
    return topo


def test_up_with_a_name_makes_a_second_lab_beside_the_first(
        tmp_path: Path, fake: type[RecordingProvider]) -> None:
    topo = _topology(tmp_path)
    first = lifecycle.up(topo)
    second = lifecycle.up(topo, lifecycle.UpOptions(name="ut-names2"))
    assert (first.lab.name, second.lab.name) == ("ut-names", "ut-names2")
    assert first.labdir.path != second.labdir.path
    assert LabDir("ut-names2").load_lab().name == "ut-names2"
    # the interfaces' MACs come from the topology's name: the same in both labs, each on
    # the bridges of its own netns (labctl-ut-names, labctl-ut-names2)
    assert first.lab.nodes[0].interfaces == second.lab.nodes[0].interfaces


def test_up_of_the_same_topology_leaves_the_lab_as_it_is(
        tmp_path: Path, fake: type[RecordingProvider]) -> None:
    topo = _topology(tmp_path)
    lifecycle.up(topo)
    fake.calls.clear()
    again = lifecycle.up(topo)
    assert again.already_up and again.repaired == []
    assert fake.calls == []


def test_up_of_the_same_topology_repairs_a_stopped_node(
        tmp_path: Path, fake: type[RecordingProvider]) -> None:
    topo = _topology(tmp_path)
    lifecycle.up(topo)
    fake.states["node2"] = NodeStatus.STOPPED
    fake.calls.clear()
    again = lifecycle.up(topo)
    assert again.repaired == ["node2"] and not again.already_up
    assert fake.calls == ["repair ['node2']", "wait_ready None"]


def test_up_of_a_changed_topology_is_refused_with_the_changes(
        tmp_path: Path, fake: type[RecordingProvider]) -> None:
    topo = _topology(tmp_path)
    lifecycle.up(topo)
    topo.write_text(TWO_NODE.replace("  node2: {}\n", "  node2: {}\n  node3: {rdma: none}\n"))
    fake.calls.clear()
    with pytest.raises(lifecycle.LabChangedError) as info:
        lifecycle.up(topo)
    assert info.value.exit_code == 2 and info.value.changes == ["node node3 added"]
    assert "--recreate" in (info.value.hint or "")
    assert fake.calls == []


def test_up_recreate_takes_the_lab_down_and_makes_it_again(
        tmp_path: Path, fake: type[RecordingProvider]) -> None:
    topo = _topology(tmp_path)
    lifecycle.up(topo)
    topo.write_text(TWO_NODE.replace("  node2: {}\n", "  node2: {}\n  node3: {rdma: none}\n"))
    fake.calls.clear()
    result = lifecycle.up(topo, lifecycle.UpOptions(recreate=True))
    assert fake.calls == ["check_host", "destroy", "create", "wait_ready None"]
    assert [n.name for n in LabDir("ut-names").load_lab().nodes] == ["node1", "node2", "node3"]
    assert "nodes" in result.removed


def test_a_lab_whose_up_died_is_refused_before_any_comparison(
        tmp_path: Path, fake: type[RecordingProvider]) -> None:
    topo = _topology(tmp_path)
    labdir = LabDir("ut-names")
    labdir.create(_lab(tmp_path / "..", TWO_NODE, "other.yaml"))
    labdir.save_state(LabState(provider="qemu", phase=Phase.CREATING))
    with pytest.raises(LabctlError, match="never fully created"):
        lifecycle.up(topo)


# --------------------------------------------------------------------------- the CLI


def test_cli_up_twice_says_already_up_and_exits_0(
        tmp_path: Path, fake: type[RecordingProvider], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    topo = _topology(tmp_path)
    assert run_main(monkeypatch, capsys, "up", str(topo), "--name", "ut-twin")[0] == 0
    code, out, err = run_main(monkeypatch, capsys, "up", str(topo), "--name", "ut-twin")
    assert code == 0, err
    assert "lab ut-twin is already up" in out and "node2" in out


def test_cli_up_of_a_changed_topology_exits_2_with_the_list(
        tmp_path: Path, fake: type[RecordingProvider], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    topo = _topology(tmp_path)
    assert run_main(monkeypatch, capsys, "up", str(topo))[0] == 0
    topo.write_text(TWO_NODE.replace("  node2: {}\n", "  node2: {memory: 1024}\n"))
    code, _out, err = run_main(monkeypatch, capsys, "up", str(topo))
    flat = " ".join(err.split())
    assert code == 2
    assert "lab ut-names is up from a different topology" in flat
    assert "- node node2: memory_mib 512 → 1024" in flat
    assert f"labctl up {topo} --recreate" in flat
    code, out, err = run_main(monkeypatch, capsys, "up", str(topo), "--recreate")
    assert code == 0, err
    assert "took the running lab down first" in out
    assert LabDir("ut-names").load_lab().node("node2").memory_mib == 1024


def test_cli_up_refuses_a_bad_name_before_anything(
        tmp_path: Path, fake: type[RecordingProvider], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run_main(monkeypatch, capsys, "up", str(_topology(tmp_path)),
                               "--name", "../x")
    assert code == 2 and "bad lab name '../x'" in err
    assert fake.calls == [] and not (tmp_path / "labs").exists()


# --------------------------------------------------------------------------- node control


@pytest.fixture
def up_lab(tmp_path: Path, fake: type[RecordingProvider]) -> LabDir:
    return lifecycle.up(_topology(tmp_path)).labdir


def test_stop_start_restart_go_through_the_provider(
        up_lab: LabDir, fake: type[RecordingProvider]) -> None:
    fake.calls.clear()
    lifecycle.stop_node(up_lab, "node2")
    assert fake.states["node2"] == NodeStatus.STOPPED
    lifecycle.start_node(up_lab, "node2", 10)
    lifecycle.restart_node(up_lab, "node1", 10)
    assert fake.calls == ["stop node2", "repair ['node2']", "wait_ready ['node2']",
                          "stop node1", "repair ['node1']", "wait_ready ['node1']"]


def test_restart_of_a_stopped_node_only_starts_it(
        up_lab: LabDir, fake: type[RecordingProvider]) -> None:
    fake.states["node1"] = NodeStatus.STOPPED
    fake.calls.clear()
    lifecycle.restart_node(up_lab, "node1", 10)
    assert fake.calls == ["repair ['node1']", "wait_ready ['node1']"]


def test_start_waits_for_its_node_only_while_another_stays_stopped(
        up_lab: LabDir, fake: type[RecordingProvider]) -> None:
    lifecycle.stop_node(up_lab, "node1")
    lifecycle.stop_node(up_lab, "node2")
    fake.calls.clear()
    lifecycle.start_node(up_lab, "node2", 10)
    assert fake.calls == ["repair ['node2']", "wait_ready ['node2']"]
    assert fake.states["node1"] == NodeStatus.STOPPED


# (command, node, state of node2 before, exit code, what stderr says)
NODE_REFUSALS: list[tuple[str, str, NodeStatus, str]] = [
    ("stop", "node9", NodeStatus.RUNNING, "lab ut-names has no node 'node9'"),
    ("start", "nod2", NodeStatus.STOPPED, "has no node 'nod2' hint: nodes: node1, node2"),
    ("restart", "x\x1b[31m", NodeStatus.RUNNING, "has no node 'x\\x1b[31m'"),
    ("stop", "node2", NodeStatus.STOPPED, "node node2 of lab ut-names is already stopped"),
    ("stop", "node2", NodeStatus.ABSENT, "node node2 of lab ut-names is already stopped"),
    ("start", "node2", NodeStatus.RUNNING, "node node2 of lab ut-names is not stopped (it is "
     "running)"),
    ("start", "node2", NodeStatus.BOOTING, "is not stopped (it is booting)"),
    ("start", "node2", NodeStatus.FAILED, "is not stopped (it is failed)"),
]


@pytest.mark.parametrize(("command", "node", "before", "says"), NODE_REFUSALS)
def test_node_commands_refuse_bad_input_with_exit_2(
        up_lab: LabDir, fake: type[RecordingProvider], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], command: str, node: str, before: NodeStatus,
        says: str) -> None:
    fake.states["node2"] = before
    fake.calls.clear()
    code, _out, err = run_main(monkeypatch, capsys, command, node, "--lab", "ut-names")
    assert code == 2
    assert says in " ".join(err.split())
    assert "hint:" in err and "Traceback" not in err
    assert fake.calls == []


def test_node_commands_name_the_lab_and_refuse_a_missing_one(
        up_lab: LabDir, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(monkeypatch, capsys, "stop", "node2")  # the only lab
    assert code == 0, err
    assert "lab ut-names: node2 stopped" in out
    assert RecordingProvider.states["node2"] == NodeStatus.STOPPED
    code, out, err = run_main(monkeypatch, capsys, "start", "node2", "--lab", "ut-names")
    assert code == 0 and "node2 is up" in out, err
    code, _out, err = run_main(monkeypatch, capsys, "restart", "node2", "--lab", "nope")
    assert code == 2 and "no lab named 'nope' is up" in err


def test_node_commands_take_the_labs_lock(up_lab: LabDir) -> None:
    with up_lab.locked("up"), pytest.raises(LabctlError, match="lab ut-names is busy"):
        lifecycle.stop_node(up_lab, "node2")


# --------------------------------------------------------------------------- qemu's stop


def _stand_in(machine_pidfile: Path | None) -> subprocess.Popen[bytes]:
    """A process whose argv has qemu's `-pidfile PATH` (a machine owns it), or not."""
    extra = ["-pidfile", str(machine_pidfile)] if machine_pidfile else []
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *extra])


def _qemu_lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
              pid: int) -> tuple[QemuProvider, LabDir]:
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "labs"))
    lab = _lab(tmp_path)
    labdir = LabDir(lab.name)
    labdir.create(lab)
    state = LabState(provider="qemu", phase=Phase.UP)
    state.nodes = {"node1": NodeState(pid=pid), "node2": NodeState(pid=0)}
    labdir.save_state(state)
    return QemuProvider(lab, labdir), labdir


def test_qemu_stop_ends_the_machines_own_process(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "labs"))
    pidfile = QemuProvider(_lab(tmp_path), LabDir("ut-names")).machine("node1").pidfile
    proc = _stand_in(pidfile)
    try:
        provider, _labdir = _qemu_lab(tmp_path, monkeypatch, proc.pid)
        deadline = time.monotonic() + 10  # until the interpreter has its argv in /proc
        while not provider.machine("node1").owns(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        provider.stop_node("node1")
        assert proc.poll() is not None  # stop returns once it has exited (and reaped it)
        node1 = next(n for n in provider.nodes() if n.name == "node1")
        assert node1.state == NodeStatus.STOPPED
    finally:
        proc.kill()
        proc.wait()


def test_qemu_stop_never_signals_a_process_that_is_not_the_machines(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = _stand_in(None)  # a recycled pid: state.json names it, it is not our qemu
    try:
        provider, _labdir = _qemu_lab(tmp_path, monkeypatch, proc.pid)
        with pytest.raises(LabctlError, match="no qemu process of node1 runs"):
            provider.stop_node("node1")
        assert proc.poll() is None
        os.kill(proc.pid, 0)
    finally:
        proc.kill()
        proc.wait()


def test_provider_stop_is_refused_where_a_provider_cannot(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    from labctl.providers import provider_for
    from labctl.providers.docker_swarm import SwarmProvider

    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "labs"))
    lab = dataclasses.replace(_lab(tmp_path), provider="docker", provider_options={
        "placement": {"node1": "a", "node2": "b"}})
    provider = provider_for(lab, LabDir(lab.name))
    assert isinstance(provider, SwarmProvider)
    with pytest.raises(UsageError, match="multi-host docker lab cannot be stopped alone"):
        provider.stop_node("node1")


@pytest.mark.parametrize(("code", "stderr"), [(0, ""), (1, "The provider was unable to stop")])
def test_vagrant_stop_halts_the_machine_by_force(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 code: int, stderr: str) -> None:
    from labctl.providers.vagrant import HALT_TIMEOUT, VagrantProvider

    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "labs"))
    lab = dataclasses.replace(_lab(tmp_path), provider="vagrant")
    labdir = LabDir(lab.name)
    labdir.create(lab)
    calls: list[tuple[tuple[str, ...], float | None]] = []

    def vagrant(_self: VagrantProvider, *args: str, timeout: float | None = None,
                lab_env: bool = True) -> subprocess.CompletedProcess[str]:
        calls.append((args, timeout))
        return subprocess.CompletedProcess(["vagrant", *args], code, "", stderr)

    monkeypatch.setattr(VagrantProvider, "_vagrant", vagrant)
    provider = VagrantProvider(lab, labdir)
    if code:
        with pytest.raises(LabctlError, match=re.escape(
                "`vagrant halt --force node2` failed (exit 1): The provider was unable")):
            provider.stop_node("node2")
    else:
        provider.stop_node("node2")
    assert calls == [(("halt", "--force", "node2"), HALT_TIMEOUT)]


class _Container:
    """The two calls docker's stop makes on a container of the SDK, recorded."""

    def __init__(self, calls: list[str], fails: bool) -> None:
        self.name = "labctl-ut-names-node1"
        self.calls = calls
        self.fails = fails

    def kill(self) -> None:
        self.calls.append("kill")
        if self.fails:
            raise RuntimeError("409 Conflict: container is not running")

    def wait(self, timeout: int) -> None:
        self.calls.append(f"wait {timeout}")


# (node, its kill fails, the error, the calls made: the client is closed every time)
DOCKER_STOPS: list[tuple[str, bool, str, list[str]]] = [
    ("node1", False, "", ["kill", "wait 30", "close"]),
    ("node1", True, "docker did not stop labctl-ut-names-node1: 409 Conflict",
     ["kill", "close"]),
    ("node2", False, "lab ut-names: the container of node2 is gone", ["close"]),
]


@pytest.mark.parametrize(("node", "fails", "says", "made"), DOCKER_STOPS)
def test_docker_stop_kills_the_container_and_closes_the_client(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node: str, fails: bool,
        says: str, made: list[str]) -> None:
    from labctl.providers.docker import STOP_WAIT_SECONDS, DockerProvider

    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "labs"))
    lab = dataclasses.replace(_lab(tmp_path), provider="docker")
    labdir = LabDir(lab.name)
    labdir.create(lab)
    calls: list[str] = []

    class Client:
        def close(self) -> None:
            calls.append("close")

    class Engine:
        def client(self) -> Client:
            return Client()

    monkeypatch.setattr(DockerProvider, "_engine", lambda _self, _state=None: Engine())
    monkeypatch.setattr(DockerProvider, "_containers",
                        lambda _self, _client: {"node1": _Container(calls, fails)})
    provider = DockerProvider(lab, labdir)
    if says:
        with pytest.raises(LabctlError, match=re.escape(says)):
            provider.stop_node(node)
    else:
        provider.stop_node(node)
    assert STOP_WAIT_SECONDS == 30 and calls == made
