"""libvirtd's leftover firewall chains are read and removed with bounded iptables calls."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from labctl.providers import libvirtd


def _fake_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "calls"
    for name in libvirtd.FIREWALLS:
        tool = bindir / name
        tool.write_text(f"#!/bin/sh\necho \"$0 $*\" >> {log}\n{body}\n")
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    return log


def test_a_tool_stuck_on_the_xtables_lock_is_given_up(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    log = _fake_tool(tmp_path, monkeypatch, "exec sleep 60")
    monkeypatch.setattr(libvirtd, "CALL_SECONDS", 1)
    started = time.monotonic()
    assert libvirtd._rules("iptables", "filter") == []
    assert time.monotonic() - started < 10
    assert "-w 10 -t filter -S" in log.read_text()  # a bounded lock wait, not a bare -w


def test_empty_libvirt_chains_and_their_jumps_are_removed(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    rules = "-P INPUT ACCEPT\\n-N LIBVIRT_INP\\n-A INPUT -j LIBVIRT_INP"
    log = _fake_tool(tmp_path, monkeypatch,
                     f'case "$*" in *" -S"*) printf "%b\\n" "{rules}";; esac')
    assert libvirtd._drop_libvirt_chains() is True
    calls = log.read_text()
    assert "-w 10 -t filter -D INPUT -j LIBVIRT_INP" in calls
    assert "-w 10 -t nat -X LIBVIRT_INP" in calls
