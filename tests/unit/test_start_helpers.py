"""labctl starts the inspector's helper in every VM node once the lab is up
(labctl/providers/machine.py start_detached): in the background, returning at once, with
what the start said on stderr kept in a log. Real processes stand in for the ssh commands."""

from __future__ import annotations

import time
from pathlib import Path

from labctl.providers.machine import start_detached


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
                    for i, d in enumerate(done)})
    assert time.monotonic() - started < 0.4  # not waited for, not one after the other
    assert [_wait_for(d) for d in done] == ["ok\n"] * 3


def test_a_failed_start_is_in_its_nodes_log(tmp_path: Path) -> None:
    log = tmp_path / "helper-start.log"
    log.write_text("an earlier start\n")
    start_detached({log: ["sh", "-c", "echo 'ssh: connect: Connection refused' >&2; exit 255"]})
    deadline = time.monotonic() + 10
    while "refused" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert log.read_text() == "an earlier start\nssh: connect: Connection refused\n"
