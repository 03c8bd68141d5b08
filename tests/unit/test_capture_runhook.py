"""`run ... --capture` and `run all --capture` without a lab: where each pcap goes, what the
text output says about it, and that no capture means the plain runner."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from labctl.capture.runhook import capture_line, captured_runner, run_pcap_path
from labctl.errors import UsageError
from labctl.lab.handle import LabHandle
from labctl.runners.execute import RunResult, run_example


def _handle(path: Path) -> LabHandle:
    """run_pcap_path reads only the lab directory's path."""
    return cast(LabHandle, SimpleNamespace(labdir=SimpleNamespace(path=path)))


def test_one_pcap_per_run_even_within_one_second(tmp_path: Path) -> None:
    handle = _handle(tmp_path / "lab")
    first = run_pcap_path(handle, "pingpong rc", tmp_path / "caps")
    assert first.parent == tmp_path / "caps" and first.name.startswith("pingpong-rc-")
    first.parent.mkdir()
    first.touch()
    second = run_pcap_path(handle, "pingpong rc", tmp_path / "caps")
    if second.stem.startswith(first.stem):  # same second: a suffix, never the same file
        assert second.name == f"{first.stem}-2.pcap"
    assert second != first
    default = run_pcap_path(handle, "rping rc", None)
    assert default.parent == tmp_path / "lab" / "captures"


def test_capture_dir_must_be_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").touch()
    with pytest.raises(UsageError, match="is not a directory"):
        run_pcap_path(_handle(tmp_path), "pingpong rc", tmp_path / "file")


def test_without_capture_the_runner_is_run_example() -> None:
    assert captured_runner(False, None) is run_example
    assert captured_runner(True, None) is not run_example
    assert captured_runner(False, Path(os.devnull)) is not run_example  # --capture-dir alone


def test_capture_line_names_the_pcap_and_the_commonest_opcodes() -> None:
    capture: dict[str, Any] = {
        "pcap": "/x/pingpong-rc.pcap", "node": "node1", "interface": "eth1", "packets": 32,
        "opcodes": {"ARP": 2, "RC_ACKNOWLEDGE": 6, "RC_SEND_ONLY": 6, "TCP": 12, "other": 6}}
    result = RunResult("pingpong", "rc", "node1", "node2", "passed", capture=capture)
    assert capture_line(result) == ("capture pingpong rc: /x/pingpong-rc.pcap (32 packets: "
                                    "TCP 12, RC_ACKNOWLEDGE 6, RC_SEND_ONLY 6, other 6, "
                                    "1 more)")
    capture.update(packets=0, opcodes={})
    assert capture_line(result) == "capture pingpong rc: /x/pingpong-rc.pcap (0 packets)"


@pytest.mark.parametrize(("pair_in_name", "label"), [(False, "rping rc"),
                                                      (True, "rping rc node1-node2")])
def test_each_run_is_captured_under_its_label(monkeypatch: pytest.MonkeyPatch,
                                               pair_in_name: bool, label: str) -> None:
    """`run all --capture` names a pcap by example; `--pairs` runs also by pair."""
    from contextlib import contextmanager

    import labctl.capture.runhook as runhook

    seen: list[tuple[str, str | None]] = []

    @contextmanager
    def capturing_run(handle: Any, server: str, name: str, enabled: bool,
                      directory: Path | None, client: str | None = None,
                      target: Any = None) -> Any:
        seen.append((name, client))
        yield SimpleNamespace(record=lambda: {"pcap": f"{name}.pcap"})

    monkeypatch.setattr(runhook, "capturing_run", capturing_run)
    monkeypatch.setattr(runhook, "server_target", lambda handle, server, client: "target")
    monkeypatch.setattr(runhook, "run_example", lambda handle, spec, s, c, options: RunResult(
        spec.name, spec.variant, s, c, "passed"))
    run = captured_runner(True, None, pair_in_name=pair_in_name)
    spec = SimpleNamespace(name="rping", variant="rc")
    result = run(cast(LabHandle, None), spec, "node1", "node2", {})  # type: ignore[arg-type]
    assert seen == [(label, "node2")]
    assert result.capture == {"pcap": f"{label}.pcap"}
