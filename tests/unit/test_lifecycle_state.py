"""The lifecycle owns state.json: written before the provider makes anything, saved after
every step with its phase; providers only record nodes and facts through the recorder."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import ClassVar

import pytest

import labctl.lab.lifecycle as lifecycle
from labctl.capabilities import SWARM, VAGRANT
from labctl.errors import LabctlError, UsageError
from labctl.node.ready import NodeRuntime
from labctl.progress import Progress
from labctl.providers.qemu import QemuProvider
from labctl.store.labdir import LabDir
from labctl.store.state import LabState, NodeState, NodeStatus, Phase
from labctl.store.state_recorder import StateRecorder

PROVIDERS = Path(lifecycle.__file__).parents[1] / "providers"
TOPOLOGY = """\
name: ut-phases
nodes:
  node1: {}
  node2: {}
links:
  - endpoints: [node1:eth1, node2:eth1]
"""


class StepProvider(QemuProvider):
    """Real qemu capabilities, fake nodes: each step writes down the state.json it sees
    (as `status` or `down` would read it then) and can fail where a test says."""

    seen: ClassVar[list[tuple[str, str, list[str]]]] = []
    fail_in: ClassVar[str] = ""
    running: ClassVar[set[str]] = set()

    def _saw(self, step: str) -> None:
        state = self.labdir.load_state()
        self.seen.append((step, state.phase, sorted(state.nodes)))

    def check_host(self) -> None:
        pass

    def create(self, record: StateRecorder, progress: Progress) -> None:
        self._saw("create")
        record.facts(accel="tcg")
        for name in ("node1", "node2"):
            record.node(name, NodeState(pid=1000 + len(record.state.nodes)))
            self.running.add(name)
            self._saw(f"started {name}")
            if self.fail_in == f"create {name}":
                raise KeyboardInterrupt
            if self.fail_in == f"cleanup under ctrl-c {name}":
                try:
                    raise KeyboardInterrupt
                except KeyboardInterrupt:  # a cleanup that fails while Ctrl-C unwinds
                    raise OSError(errno.EBADF, "Bad file descriptor") from None

    def repair(self, record: StateRecorder, nodes: list[str], progress: Progress) -> None:
        self._saw("repair")
        for name in nodes:
            record.node(name, NodeState(pid=2000))
            self.running.add(name)

    def wait_ready(self, state: LabState, timeout: float, progress: Progress,
                   nodes: list[str] | None = None) -> None:
        self._saw("wait")
        if self.fail_in == "wait":
            raise LabctlError("node node2: not ready")
        for name in nodes or list(state.nodes):
            state.nodes[name].port_state = "ACTIVE"

    def nodes(self) -> list[NodeRuntime]:
        return [NodeRuntime(n, NodeStatus.RUNNING if n in self.running else NodeStatus.STOPPED)
                for n in ("node1", "node2")]

    def stop_node(self, node: str) -> None:
        self.running.discard(node)


@pytest.fixture
def steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> type[StepProvider]:
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "labs"))
    monkeypatch.setattr(StepProvider, "seen", [])
    monkeypatch.setattr(StepProvider, "running", set())
    monkeypatch.setattr(lifecycle, "provider_for", StepProvider)
    (tmp_path / "t.yaml").write_text(TOPOLOGY)
    return StepProvider


def _up(tmp_path: Path) -> LabDir:
    return lifecycle.up(tmp_path / "t.yaml").labdir


def test_state_is_written_before_create_and_after_each_step(
        tmp_path: Path, steps: type[StepProvider]) -> None:
    labdir = _up(tmp_path)
    assert steps.seen == [
        ("create", "creating", []),  # before anything exists: `down` knows where to look
        ("started node1", "creating", ["node1"]),  # each node the moment it exists
        ("started node2", "creating", ["node1", "node2"]),
        ("wait", "creating", ["node1", "node2"]),
    ]
    state = labdir.load_state()
    assert (state.provider, state.phase, state.netns, state.accel) == (
        "qemu", Phase.UP, "labctl-ut-phases", "tcg")
    assert state.ready_seconds is not None and state.ready_seconds >= 0
    # what wait_ready filled in is saved with the phase
    assert [n.port_state for n in state.nodes.values()] == ["ACTIVE", "ACTIVE"]


def test_an_up_interrupted_half_way_leaves_the_started_node_recorded(
        tmp_path: Path, steps: type[StepProvider], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(StepProvider, "fail_in", "create node1")
    with pytest.raises(KeyboardInterrupt):
        _up(tmp_path)
    state = LabDir("ut-phases").load_state()
    assert state.phase == Phase.CREATING and list(state.nodes) == ["node1"]
    assert state.nodes["node1"].pid == 1000


def test_a_cleanup_failing_under_ctrl_c_is_still_the_interrupt(
        tmp_path: Path, steps: type[StepProvider], monkeypatch: pytest.MonkeyPatch) -> None:
    """`from None` hides the context from a traceback, not from __context__: the error
    raised while Ctrl-C unwound is the interrupt (exit 130, "interrupted; ..."), not "up
    failed: OSError(9, ...)"."""
    monkeypatch.setattr(StepProvider, "fail_in", "cleanup under ctrl-c node1")
    with pytest.raises(KeyboardInterrupt) as caught:
        _up(tmp_path)
    assert isinstance(caught.value.__cause__, OSError)
    assert list(LabDir("ut-phases").load_state().nodes) == ["node1"]


def test_an_error_of_its_own_is_still_up_failed(
        tmp_path: Path, steps: type[StepProvider], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(StepProvider, "create", lambda *_: os.close(-1))
    with pytest.raises(LabctlError, match=r"up failed: OSError\(9, 'Bad file descriptor'\)"):
        _up(tmp_path)


def test_a_failed_wait_leaves_phase_creating(tmp_path: Path, steps: type[StepProvider],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(StepProvider, "fail_in", "wait")
    with pytest.raises(LabctlError, match="not ready"):
        _up(tmp_path)
    assert LabDir("ut-phases").load_state().phase == Phase.CREATING


def test_a_repair_is_phase_repairing_until_its_nodes_are_ready(
        tmp_path: Path, steps: type[StepProvider], monkeypatch: pytest.MonkeyPatch) -> None:
    labdir = _up(tmp_path)
    lifecycle.stop_node(labdir, "node2")
    steps.seen.clear()
    monkeypatch.setattr(StepProvider, "fail_in", "wait")
    with pytest.raises(LabctlError):
        lifecycle.start_node(labdir, "node2", 10)
    assert steps.seen == [("repair", "up", ["node1", "node2"]),
                          ("wait", "repairing", ["node1", "node2"])]
    assert labdir.load_state().nodes["node2"].pid == 2000
    assert labdir.load_state().phase == Phase.REPAIRING
    monkeypatch.setattr(StepProvider, "fail_in", "")
    assert lifecycle.repair(labdir, 10) == []  # node2 runs again: nothing to repair
    lifecycle.restart_node(labdir, "node2", 10)
    assert labdir.load_state().phase == Phase.UP


def test_the_netns_is_recorded_only_for_providers_that_make_one(
        tmp_path: Path, steps: type[StepProvider], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(StepProvider, "capabilities", VAGRANT)
    assert _up(tmp_path).load_state().netns == ""
    assert not SWARM.netns


def test_mounts_where_the_provider_has_none_are_refused_before_anything(
        tmp_path: Path, steps: type[StepProvider], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(StepProvider, "capabilities", SWARM)
    (tmp_path / "share").mkdir()
    (tmp_path / "t.yaml").write_text(TOPOLOGY.replace("node1: {}", "node1: {mounts: "
                                                      "['share:/mnt/share']}"))
    with pytest.raises(UsageError, match=r"host folders \(mounts\) are not supported for "
                       r"multi-host docker labs \(nodes node1\)") as info:
        _up(tmp_path)
    assert info.value.exit_code == 2 and "labctl cp" in (info.value.hint or "")
    assert steps.seen == [] and not LabDir("ut-phases").path.exists()


def test_no_provider_saves_state_or_sets_a_phase() -> None:
    """Only the lifecycle does (the Docker host VM, a lab of its own, is in dockerhost/)."""
    paths = list(PROVIDERS.glob("*.py"))
    assert paths
    for path in paths:
        text = path.read_text()
        assert "save_state" not in text and "Phase" not in text, path.name
