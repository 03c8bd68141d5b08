"""One command reads its lab's state.json once and renders the nodes' ssh_config once
(labctl/lab/handle.py: one LabHandle per command, LabDir.remember_state).

The commands run through the CLI's main() against a lab made as `up` makes it, its qemu
nodes stood in by local processes (tests/unit/standin.py). How labctl reaches a node is
kept whole down to the ssh command line (QemuProvider.exec_argv, its ssh_config refresh):
only ssh itself is replaced by a local script that answers as a node would, so each node
command costs what it costs in a live lab. Every read of the lab's state.json is counted
at the bounded file read, every rendering of ssh_config at labctl/node/ssh.py's
config_text.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from labctl import bounded
from labctl.lab import handle as handle_module
from labctl.lab import lifecycle
from labctl.lab.handle import LabHandle
from labctl.node import ssh
from labctl.node.ready import NodeRuntime
from labctl.nodeside import reply
from labctl.progress import Progress
from labctl.providers import qemu
from labctl.providers.qemu import QemuProvider
from labctl.store.labdir import LabDir
from labctl.store.state import LabState, NodeState, NodeStatus
from labctl.store.state_recorder import StateRecorder
from labctl.topology import load as topology_load
from tests.unit.clirun import run_main
from tests.unit.standin import GOOD_STATUS_REPLY, LAB
from tests.unit.test_layers import LAYERS, NEUTRAL

OUTPUTS = Path(__file__).parent / "outputs"

# A node as labctl's commands see it: ibv_rc_pingpong's server prints its group line and
# what a live server printed, then waits until the client has run; the client prints what
# a live client printed; the node's status, its counters (none), the fault's gate (done),
# each a reply line, and exit 0 for the rest (ready probes, tc, `exec`'s command).
NODE_SCRIPT = r"""
import os, re, sys, time
folder, node, words = sys.argv[1], sys.argv[2], sys.argv[3:]
line = " ".join(words)
if "ibv_rc_pingpong" in line:
    client = re.fullmatch(r"[0-9]+([.][0-9]+){3}", words[-1]) is not None
    side = "client" if client else "server"
    if not client:
        print("labctl-run-pgid 4242", flush=True)
    sys.stdout.write(open(os.path.join(folder, side + ".txt")).read())
    sys.stdout.flush()
    flag = os.path.join(folder, "client-ran")
    if client:
        open(flag, "w").close()
    else:
        deadline = time.monotonic() + 20
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.02)
elif "labctl/nodeside/status.sh" in line:
    sys.stdout.write(open(os.path.join(folder, "status.json")).read())
elif "statistic show" in line:
    sys.stdout.write(open(os.path.join(folder, "counters.json")).read())
elif words[:2] == ["python3", "-"]:
    sys.stdout.write(open(os.path.join(folder, "gate.json")).read())
"""


@dataclass
class Reads:
    """What one command read of its lab and made of it."""

    state: int = 0  # reads of state.json
    lab_json: int = 0  # reads of lab.json (the resolved topology the lab was made from)
    ssh_config: int = 0  # ssh_config texts rendered
    node_commands: list[list[str]] = field(default_factory=list)
    # the command's hops: each distinct call from a function of one layer of labctl (cli,
    # lab, runners, providers, node, store, topology...: tests/unit/test_layers.py's) into
    # a function of another; the neutral helpers (bounded reads, hostproc, paths...) are
    # not counted
    hops: set[tuple[str, str]] = field(default_factory=set)


# The hops of docs/architecture.md's "How a command flows", at most (a change that adds
# hops to a flow says so here and there).
MOST_HOPS = {"up": 48, "run pingpong": 47, "fault add": 36}


@contextlib.contextmanager
def _tracing_hops(reads: Reads) -> Iterator[None]:
    """Record reads.hops while the block runs, in every thread it starts."""

    def profile(frame: Any, event: str, arg: Any) -> None:
        caller = frame.f_back
        if event != "call" or caller is None:
            return
        callee_module = frame.f_globals.get("__name__", "")
        caller_module = caller.f_globals.get("__name__", "")
        if not (callee_module.startswith("labctl.") and caller_module.startswith("labctl.")):
            return
        callee_part, caller_part = callee_module.split(".")[1], caller_module.split(".")[1]
        if callee_part != caller_part and NEUTRAL not in (LAYERS.get(callee_part, NEUTRAL),
                                                          LAYERS.get(caller_part, NEUTRAL)):
            reads.hops.add((f"{caller_module}.{caller.f_code.co_qualname}",
                            f"{callee_module}.{frame.f_code.co_qualname}"))

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def _report_hops(flow: str, reads: Reads) -> None:
    """What the flow cost, printed for `pytest -s` (docs/architecture.md quotes it)."""
    parts = sorted({callee.split(".")[1] for _, callee in reads.hops})
    print(f"\n{flow}: {len(reads.hops)} hops into {', '.join(parts)}; "
          f"{len(reads.node_commands)} node commands; state.json read {reads.state}x, "
          f"lab.json {reads.lab_json}x")
    assert 0 < len(reads.hops) <= MOST_HOPS[flow], sorted(reads.hops)
    assert reads.lab_json == 1  # the lab as made: its topology is not parsed again


def _count_reads(monkeypatch: pytest.MonkeyPatch, state_file: Path) -> Reads:
    """Count the reads of `state_file` (at bounded.read_text, its one reader) and the
    ssh_config texts rendered, from now on."""
    reads = Reads()
    wanted = os.path.realpath(state_file)
    read_text, config_text = bounded.read_text, ssh.config_text

    def counting_read(path: Any, *args: Any, **kwargs: Any) -> str:
        if os.path.realpath(path) == wanted:
            reads.state += 1
        elif os.path.realpath(path) == os.path.join(os.path.dirname(wanted), "lab.json"):
            reads.lab_json += 1
        return read_text(path, *args, **kwargs)

    def counting_config(*args: Any, **kwargs: Any) -> str:
        reads.ssh_config += 1
        return config_text(*args, **kwargs)

    monkeypatch.setattr(bounded, "read_text", counting_read)
    monkeypatch.setattr(ssh, "config_text", counting_config)
    return reads


@pytest.fixture
def counted(lab_running: LabDir, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Reads]:
    """The running stand-in lab, its nodes answering through NODE_SCRIPT, and the count of
    what the command under test reads."""
    folder = tmp_path / "node"
    folder.mkdir()
    (folder / "server.txt").write_text((OUTPUTS / "pingpong-rc-c.server.txt").read_text())
    (folder / "client.txt").write_text((OUTPUTS / "pingpong-rc-c.client.txt").read_text())
    (folder / "status.json").write_text(GOOD_STATUS_REPLY)
    (folder / "counters.json").write_text(reply.line({"rdma": [], "tcp": []}) + "\n")
    (folder / "gate.json").write_text(reply.line({}) + "\n")
    reads = _count_reads(monkeypatch, lab_running.state_file)

    def node_argv(config: Path, node: str, command: list[str], *, tty: bool = False,
                  options: dict[str, str] | None = None) -> list[str]:
        assert config == lab_running.ssh_config  # the config labctl has just checked
        reads.node_commands.append(command)
        return [sys.executable, "-c", NODE_SCRIPT, str(folder), node, *command]

    monkeypatch.setattr(ssh, "ssh_argv", node_argv)
    with _tracing_hops(reads):
        yield reads


def test_run_pingpong_reads_the_state_once(counted: Reads, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(monkeypatch, capsys, "run", "pingpong", "--transport", "rc")
    assert (code, err) == (0, ""), out
    assert re.search(r"pingpong rc\s.*passed", out), out
    # its node commands: the counters before and after, the ready probe, server, client,
    # and the server's stop in its node; each one through the lab's ssh_config
    assert len(counted.node_commands) >= 6
    assert (counted.state, counted.ssh_config) == (1, 1)
    _report_hops("run pingpong", counted)


def test_status_reads_the_state_once(counted: Reads, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(monkeypatch, capsys, "status", "--lab", LAB)
    assert (code, err) == (0, ""), out
    assert "running" in out and len(counted.node_commands) == 2  # each node's live status
    assert (counted.state, counted.ssh_config) == (1, 1)


def test_exec_reads_the_state_once(counted: Reads, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    ran: list[list[str]] = []

    def execvp(file: str, argv: list[str]) -> None:  # exec replaces labctl with ssh
        ran.append(argv)
        raise SystemExit(0)

    monkeypatch.setattr(os, "execvp", execvp)
    code, out, err = run_main(monkeypatch, capsys, "exec", "node1", "--", "true")
    assert (code, out, err) == (0, "", "")
    assert ran and ran[0][-1] == "true" and counted.node_commands == [["true"]]
    assert (counted.state, counted.ssh_config) == (1, 1)


def test_fault_add_reads_the_state_once(counted: Reads, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(monkeypatch, capsys, "fault", "add", "node2:eth1", "drop",
                              "--opcode", "send", "--count", "1")
    assert (code, err) == (0, ""), out
    assert out.startswith("fault 1 on node2:eth1: ")
    # the gate loaded, then the tc filter installed, in the node
    assert len(counted.node_commands) == 2
    assert (counted.state, counted.ssh_config) == (1, 1)
    _report_hops("fault add", counted)


class MadeProvider(QemuProvider):
    """The qemu provider with what `up` reads and writes of the lab kept (the recorder's
    records, ssh_config written at create and checked by its own wait_ready) and no VM
    made: the wait for the machines' ready lines (wait_ready_lines) answers at once."""

    def check_host(self) -> None:
        pass

    def create(self, record: StateRecorder, progress: Progress) -> None:
        record.facts(accel="tcg")
        ports = {n.name: 40000 + n.index for n in self.lab.nodes}
        ssh.write_config(self.labdir.ssh_config, self.labdir.ssh_key, ports,
                         self.labdir.known_hosts)
        for node in self.lab.nodes:
            record.node(node.name, NodeState(pid=0, ssh_port=ports[node.name],
                                             rdma_dev="rxe0"))

    def nodes(self) -> list[NodeRuntime]:
        return [NodeRuntime(n.name, NodeStatus.RUNNING) for n in self.lab.nodes]


def wait_ready_lines(machines: dict[str, Any], state: LabState, *args: Any) -> None:
    """Every machine's ready line came: its RDMA port is ACTIVE."""
    for name in machines:
        state.nodes[name].port_state = "ACTIVE"


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_up_reads_the_state_it_wrote_once(state_dir: Path, tmp_path: Path, as_json: bool,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """`up` writes state.json at each step (the lifecycle, the recorder) and reads it
    once, for what it prints (the one handle of the lifecycle's result): the lifecycle
    hands the provider the state it holds. ssh_config is rendered twice: written at
    create, checked before the wait. The topology is parsed once: the CLI hands the lab it
    resolved (to show its mounts) to the lifecycle."""
    monkeypatch.setattr(lifecycle, "provider_for", MadeProvider)
    monkeypatch.setattr(handle_module, "provider_for", MadeProvider)
    monkeypatch.setattr(qemu, "wait_machines_ready", wait_ready_lines)
    monkeypatch.setattr(qemu, "start_detached", lambda commands, folder: None)
    topology = tmp_path / "t.yaml"
    topology.write_text("name: ahandle-up\nnodes:\n  node1: {}\n  node2: {}\nlinks:\n"
                        "  - endpoints: [node1:eth1, node2:eth1]\n")
    reads = _count_reads(monkeypatch, state_dir / "ahandle-up" / "state.json")
    parsed: list[str] = []
    parse = topology_load._parse
    monkeypatch.setattr(topology_load, "_parse", lambda text, file, *args, **kwargs: (
        parsed.append(file), parse(text, file, *args, **kwargs))[1])
    with _tracing_hops(reads):
        code, out, err = run_main(monkeypatch, capsys, "up", str(topology),
                                  *(["--json"] if as_json else []))
    assert code == 0, err
    assert ('"phase": "up"' in out) if as_json else ("running" in out), out
    assert (reads.state, reads.ssh_config) == (1, 2)
    assert parsed == [str(topology)]
    if not as_json:
        _report_hops("up", reads)


def test_what_the_command_writes_is_read_again(lab_running: LabDir) -> None:
    """A handle keeps the state until its own command writes it: then the next read is
    the file's, checked again (and the ssh_config made again from it)."""
    handle = LabHandle(LabDir(LAB, lab_running.path.parent))
    labdir = handle.labdir
    before = labdir.load_state()
    before.nodes["node1"].gid_index = 3  # a copy: what a caller changes is its own
    assert labdir.load_state().nodes["node1"].gid_index == 1
    lab_running.save_state(before)  # another LabDir (another process) wrote it meanwhile
    assert labdir.load_state().nodes["node1"].gid_index == 1  # this command's state
    version = labdir.state_version()
    labdir.save_state(before)
    assert labdir.state_version() != version
    assert labdir.load_state().nodes["node1"].gid_index == 3


def test_a_corrupt_state_is_refused_at_its_one_read(lab_running: LabDir,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Remembered or not, state.json is checked when read: a corrupt one is an error
    (exit 1, what to do), never a traceback or a state of defaults."""
    lab_running.state_file.write_text('{"provider": "qemu", "nodes": {"../x": {}}}\n')
    monkeypatch.setenv("COLUMNS", "300")
    code, out, err = run_main(monkeypatch, capsys, "status", "--lab", LAB)
    assert code == 1 and "Traceback" not in out + err
    assert "state.json is corrupt" in err and f"`labctl down --lab {LAB}`" in err


def test_a_handle_for_a_session_reads_the_state_at_each_use(lab_running: LabDir) -> None:
    """The pytest plugin's handle lives for a whole session: it never keeps the state."""
    handle = LabHandle(LabDir(LAB, lab_running.path.parent), per_command=False)
    state = handle.labdir.load_state()
    state.nodes["node1"].gid_index = 3
    lab_running.save_state(state)
    assert handle.node_state("node1").gid_index == 3  # type: ignore[union-attr]
    assert handle.labdir.state_version() is None


def test_taking_the_lock_drops_the_remembered_state(lab_running: LabDir) -> None:
    """What a command does under the lab's lock starts from the file as it is now."""
    labdir = LabHandle(LabDir(LAB, lab_running.path.parent)).labdir
    assert labdir.load_state().nodes["node1"].gid_index == 1
    changed = lab_running.load_state()
    changed.nodes["node1"].gid_index = 2
    lab_running.save_state(changed)
    with labdir.locked("up"):
        assert labdir.load_state().nodes["node1"].gid_index == 2


def test_an_empty_lab_state_is_an_empty_state(state_dir: Path) -> None:
    """Before `up` wrote any state, a remembered read is the empty state, as before."""
    labdir = LabDir("ut-empty", state_dir)
    labdir.remember_state()
    assert labdir.load_state() == LabState(provider="")
