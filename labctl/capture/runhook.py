"""`labctl run ... --capture`: record a run's traffic on the server's data link."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from labctl.capture.process import RunCapture, capturing
from labctl.capture.target import CaptureTarget, resolve
from labctl.errors import UsageError
from labctl.lab.handle import LabHandle
from labctl.runners.execute import RunResult, run_example
from labctl.runners.spec import ExampleSpec


def run_pcap_path(handle: LabHandle, label: str, directory: Path | None) -> Path:
    """DIRECTORY (or the lab directory's captures/)/EXAMPLE-VARIANT-TIME.pcap, with -2, -3,
    ... when a run of the same second has that name already (`run all --pairs`)."""
    base = directory if directory is not None else handle.labdir.path / "captures"
    if base.exists() and not base.is_dir():
        raise UsageError(f"--capture-dir {base} is not a directory")
    stem = f"{label.replace(' ', '-')}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base / f"{stem}.pcap", 1
    while path.exists():
        n += 1
        path = base / f"{stem}-{n}.pcap"
    return path


def server_target(handle: LabHandle, server: str) -> CaptureTarget:
    """The server's RDMA interface: one capture there sees both directions of the run."""
    iface = handle.lab.node(server).rdma_interface
    if iface is None:
        raise UsageError(f"node {server} has no RDMA interface to capture on")
    return resolve(handle, server, iface.name)


@contextmanager
def capturing_run(handle: LabHandle, server: str, label: str, enabled: bool,
                  directory: Path | None,
                  target: CaptureTarget | None = None) -> Iterator[RunCapture | None]:
    """Capture on the server's RDMA interface around the block (nothing if not enabled)."""
    if not enabled and directory is None:
        yield None
        return
    target = target or server_target(handle, server)
    with capturing(target, run_pcap_path(handle, label, directory)) as cap:
        yield cap


Runner = Callable[[LabHandle, ExampleSpec, str, str, dict[str, Any]], RunResult]


def captured_runner(enabled: bool, directory: Path | None) -> Runner:
    """run_example, each run in a capture of its own when asked (`run all --capture`)."""
    if not enabled and directory is None:
        return run_example

    targets: dict[str, CaptureTarget] = {}  # resolved once per server (in the VM: an ssh)

    def run(handle: LabHandle, spec: ExampleSpec, server: str, client: str,
            options: dict[str, Any]) -> RunResult:
        if server not in targets:
            targets[server] = server_target(handle, server)
        label = f"{spec.name} {spec.variant}"
        with capturing_run(handle, server, label, True, directory, targets[server]) as cap:
            result = run_example(handle, spec, server, client, options)
        result.capture = cap.record() if cap else None
        return result

    return run


def capture_line(result: RunResult) -> str:
    """One line per captured run for the text output: the pcap and its commonest opcodes."""
    record = result.capture or {}
    opcodes = sorted(record.get("opcodes", {}).items(), key=lambda kv: (-kv[1], kv[0]))
    top = ", ".join(f"{name} {n}" for name, n in opcodes[:4])
    more = f", {len(opcodes) - 4} more" if len(opcodes) > 4 else ""
    return (f"capture {result.label}: {record.get('pcap')} ({record.get('packets', 0)} "
            f"packets{': ' + top + more if top else ''})")
