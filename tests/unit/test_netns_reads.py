"""labctl's own network-namespace reads of container nodes, from the engine's host
(labctl/dockerhost/netns.py): which container they trust, the argv they build, the host
side's check of the pid, and which probes may go that way."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import labctl.dockerhost.netns as netns
from labctl.runners import execute
from labctl.runners.example_spec import Endpoint, RunContext
from labctl.runners.examples import EXAMPLES
from labctl.runners.probes import CM_LISTEN, NetnsProbe, group_joined_probe, listening_probe

CID = "ab" * 32
LAB = "dlab"


def _attrs(**changes: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {"Id": CID, "Config": {"Labels": {"labctl.lab": LAB}},
                             "State": {"Running": True, "Pid": 4242}}
    for key, value in changes.items():
        if key in ("Running", "Pid"):
            attrs["State"][key] = value
        elif key == "lab":
            attrs["Config"]["Labels"]["labctl.lab"] = value
        else:
            attrs[key] = value
    return attrs


class _Client:
    """An engine client: answers inspect_container with `attrs` (or fails)."""

    made = 0

    def __init__(self, attrs: Any, fail: bool = False) -> None:
        self._attrs, self._fail, self.closed = attrs, fail, False
        self.api = SimpleNamespace(inspect_container=self._inspect)
        _Client.made += 1

    def _inspect(self, name: str) -> Any:
        if self._fail:
            raise RuntimeError("404 no such container")
        return self._attrs

    def close(self) -> None:
        self.closed = True


def _target(monkeypatch: pytest.MonkeyPatch, attrs: Any, fail: bool = False) -> Any:
    client = _Client(attrs, fail)
    monkeypatch.setattr(netns, "sdk", lambda: SimpleNamespace(DockerClient=lambda **_: client))
    targets = netns.Targets(LAB)
    found = targets.find("unix:///x.sock", "labctl-dlab-node1")
    targets.close()
    assert client.closed
    return found


def test_one_engine_client_serves_every_read_of_a_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns, "sdk", lambda: SimpleNamespace(
        DockerClient=lambda **_: _Client(_attrs())))
    _Client.made = 0
    targets = netns.Targets(LAB)
    for _ in range(3):
        assert targets.find("unix:///x.sock", "labctl-dlab-node1") == (4242, CID)
    targets.find("unix:///other.sock", "labctl-dlab-node2")
    assert _Client.made == 2


def test_the_running_container_of_the_lab_gives_its_pid_and_id(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert _target(monkeypatch, _attrs()) == (4242, CID)


@pytest.mark.parametrize("changes", [
    {"lab": "otherlab"}, {"Running": False}, {"Running": "true"}, {"Pid": 0}, {"Pid": 1},
    {"Pid": True}, {"Pid": "4242"}, {"Pid": 2**40}, {"Id": "ab" * 31},
    {"Id": CID.upper()}, {"Id": CID + "; reboot"}, {"Config": None}, {"State": None},
    {"Config": {"Labels": ["labctl.lab=dlab"]}}, {"State": [True, 4242]},
])
def test_anything_else_the_engine_says_is_not_trusted(monkeypatch: pytest.MonkeyPatch,
                                                      changes: dict[str, Any]) -> None:
    assert _target(monkeypatch, _attrs(**changes)) is None


def test_an_engine_that_fails_or_answers_nonsense_is_no_target(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert _target(monkeypatch, _attrs(), fail=True) is None
    assert _target(monkeypatch, ["not", "a", "dict"]) is None


def test_the_docker_host_vm_runs_the_read_over_its_ssh_master(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(netns, "vm_for_socket", lambda url: "default")
    monkeypatch.setattr(netns.DockerHostVM, "ssh_argv",
                        lambda self, command: ["ssh", "-T", "engine", "--",
                                               shlex.join(command)])
    argv = netns.netns_argv("unix:///vm.sock", 4242, CID, ["ss", "-Hltn", "sport = :1"])
    assert argv is not None and argv[:4] == ["ssh", "-T", "engine", "--"]
    remote = shlex.split(argv[4])
    assert remote[:2] == ["sh", "-c"] and remote[3:] == [
        "sh", "4242", CID, "ss", "-Hltn", "sport = :1"]


def test_a_remote_engine_or_a_foreign_pid_falls_back_to_docker_exec(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns, "vm_for_socket", lambda url: None)
    assert netns.netns_argv("tcp://10.0.0.5:2376", 4242, CID, ["true"]) is None
    assert netns.netns_argv("ssh://user@host", 4242, CID, ["true"]) is None
    # a local socket whose pid is not a container of this kernel (another host's engine
    # behind a forwarded socket): this process's cgroup does not hold the id
    assert netns.netns_argv("unix:///fwd.sock", os.getpid(), CID, ["true"]) is None


def _own_cgroup_word() -> str:
    return Path("/proc/self/cgroup").read_text().split(":")[-1].strip() or "/"


def test_a_local_engines_container_is_entered_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns, "vm_for_socket", lambda url: None)
    monkeypatch.setattr(netns.shutil, "which", lambda tool: "/usr/bin/nsenter")
    word = _own_cgroup_word()
    argv = netns.netns_argv("unix:///var/run/docker.sock", os.getpid(), word, ["true"])
    assert argv is not None and argv[:2] == ["sh", "-c"] and argv[3:] == [
        "sh", str(os.getpid()), word, "true"]


def _enter(pid: int, cid: str, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", netns._ENTER, "sh", str(pid), cid, *command],
                          capture_output=True, text=True, timeout=30, check=False)


def test_the_host_side_refuses_a_pid_that_is_not_the_containers() -> None:
    """What a pid reused after a restart gets: no nsenter, exit GONE, a line saying why."""
    result = _enter(os.getpid(), CID, "echo", "entered")
    assert result.returncode == netns.GONE and result.stdout == ""
    assert result.stderr == f"labctl: process {os.getpid()} is no longer container {CID}\n"
    result = _enter(2**22 + 7, CID, "echo", "entered")
    assert result.returncode == netns.GONE


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/nsenter").exists(),
                    reason="nsenter --net needs root")
def test_the_host_side_enters_the_netns_of_the_containers_pid() -> None:
    """The command's words arrive as they were given (none is shell text)."""
    result = _enter(os.getpid(), _own_cgroup_word(), "printf", "%s|", "a b", "$HOME", ";x")
    assert (result.returncode, result.stdout) == (0, "a b|$HOME|;x|"), result.stderr


def test_labctls_probes_may_run_from_the_host_a_users_may_not() -> None:
    assert isinstance(CM_LISTEN, NetnsProbe)
    assert isinstance(listening_probe(18515), NetnsProbe)
    assert isinstance(group_joined_probe("239.1.1.1"), NetnsProbe)
    roce = RunContext(Endpoint("node1", "rxe0", "rxe", 1, "10.77.1.1"),
                      Endpoint("node2", "rxe0", "rxe", 1, "10.77.1.2"))
    iwarp = RunContext(Endpoint("node1", "siw0", "siw", None, "10.77.1.1"),
                       Endpoint("node2", "siw0", "siw", None, "10.77.1.2"))
    for ctx in (roce, iwarp):
        for key, spec in EXAMPLES.items():
            if spec.ready_probe is not None:
                assert isinstance(spec.ready_probe(ctx), NetnsProbe), key


class _Handle:
    """Records which way each probe slice ran."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def _ok(self, kind: str, command: list[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append((kind, command))
        return subprocess.CompletedProcess(command, 0, "", "")

    def run(self, node: str, command: list[str], **_: Any) -> Any:
        return self._ok("node", command)

    def run_in_netns(self, node: str, command: list[str], **_: Any) -> Any:
        return self._ok("netns", command)


@pytest.mark.parametrize(("probe", "way"), [
    (listening_probe(18515), "netns"),
    ("sh -c 'test -e /tmp/ready'", "node"),  # a user's --ready: in the node
])
def test_the_wait_runs_each_probe_its_own_way(probe: str, way: str) -> None:
    handle = _Handle()
    spec: Any = SimpleNamespace(ready_probe=lambda ctx: probe, ready_seconds=5)
    ctx: Any = SimpleNamespace(server=SimpleNamespace(node="node1"))
    server: Any = SimpleNamespace(running=lambda: True)
    execute._wait_listening(handle, spec, ctx, server)  # type: ignore[arg-type]
    assert [kind for kind, _ in handle.calls] == [way]
    assert handle.calls[0][1][-1] == f"until {probe}; do sleep 0.1; done"
