"""labctl starts the inspector's helper in every VM node once the lab is up
(labctl/vm/machine.py start_detached): in the background, returning at once, with
what the start said on stderr kept in a log. Real processes stand in for the ssh commands;
`down` ends the starts still running (real ssh clients that connect nowhere)."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

from labctl.node import ssh
from labctl.providers.qemu import destroy_machines
from labctl.store.labdir import LabDir
from labctl.vm.machine import start_detached


def _wait_for(path: Path, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"{path} still empty after {timeout} s")


def test_returns_before_the_commands_end_and_they_still_run(tmp_path: Path) -> None:
    done = [tmp_path / f"done{i}" for i in range(3)]
    started = time.monotonic()
    start_detached({tmp_path / f"node{i}.log": ["sh", "-c", f"sleep 0.5; echo ok > {d}"]
                    for i, d in enumerate(done)}, tmp_path)
    assert time.monotonic() - started < 0.4  # not waited for, not one after the other
    assert [_wait_for(d) for d in done] == ["ok\n"] * 3


def test_a_failed_start_is_in_its_nodes_log(tmp_path: Path) -> None:
    log = tmp_path / "helper-start.log"
    log.write_text("an earlier start\n")
    start_detached({log: ["sh", "-c", "echo 'ssh: connect: Connection refused' >&2; exit 255"]},
                   tmp_path)
    deadline = time.monotonic() + 10
    while "refused" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert log.read_text() == "an earlier start\nssh: connect: Connection refused\n"


def test_a_log_that_is_a_link_is_replaced_not_appended_to(tmp_path: Path) -> None:
    decoy = tmp_path / "decoy"
    decoy.write_text("host file\n")
    log = tmp_path / "lab" / "helper-start.log"
    log.parent.mkdir()
    log.symlink_to(decoy)
    start_detached({log: ["sh", "-c", "echo refused >&2; exit 255"]}, log.parent)
    deadline = time.monotonic() + 10
    while not (log.is_file() and not log.is_symlink() and "refused" in log.read_text()) \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    assert decoy.read_text() == "host file\n"
    assert not log.is_symlink() and log.read_text() == "refused\n"


def _ssh_waiting(config: Path) -> Path:
    """A real ssh client that outlives `up` (as a helper start on a slow node does): its
    proxy command never answers (and ends with it), so it waits, sending nothing anywhere.
    Returns the file the proxy command creates once it runs: until then ssh's child for it
    may not have exec'd yet, a second `ssh -F CONFIG` in /proc (seen under load in CI)."""
    started = config.parent / "proxy-started"
    proxy = f"sh -c ': > {shlex.quote(str(started))}; cat >/dev/null; true'"
    start_detached({config.parent / "start.log": [
        "ssh", "-F", str(config), "-o", f"ProxyCommand={proxy}",
        "-o", "ConnectTimeout=120", "-T", "node1", "--", "true"]}, config.parent)
    return started


def test_down_ends_the_ssh_sessions_the_masters_did_not_carry(tmp_path: Path) -> None:
    labdir = LabDir("ut-sessions", root=tmp_path)
    labdir.path.mkdir(parents=True)
    labdir.ssh_config.write_text(f"Host node1\n  ControlPath {labdir.path}/cm-%n\n")
    other = tmp_path / "other" / "ssh_config"  # another lab's: not to be touched
    other.parent.mkdir()
    other.write_text("Host node1\n")
    started = [_ssh_waiting(labdir.ssh_config), _ssh_waiting(other)]
    deadline = time.monotonic() + 10
    while not all(path.exists() for path in started):
        assert time.monotonic() < deadline, "the ssh clients did not start"
        time.sleep(0.02)
    [pid] = ssh.clients_of(labdir.ssh_config)
    try:
        removed = destroy_machines(labdir, "ut-sessions", None)
        assert removed == [f"ssh session (pid {pid})"]
        assert ssh.clients_of(labdir.ssh_config) == []
        assert len(ssh.clients_of(other)) == 1
    finally:
        ssh.end_clients(other)
    assert ssh.clients_of(other) == []
