"""`labctl run ... --capture`: record a run's traffic on the server's data link."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from labctl.capture.process import RunCapture, capturing
from labctl.capture.target import CaptureTarget, resolve
from labctl.errors import UsageError
from labctl.lab.handle import LabHandle
from labctl.runners.example_spec import ExampleSpec
from labctl.runners.execute import RunResult, run_example
from labctl.topology.resolved import Interface


def run_pcap_path(handle: LabHandle, label: str, directory: Path | None) -> Path:
    """DIRECTORY (or the lab directory's captures/)/EXAMPLE-VARIANT-TIME.pcap, with -2, -3,
    ... when a run of the same second has that name already (`run all --pairs`)."""
    base = directory if directory is not None else handle.labdir.path / "captures"
    if base.exists() and not base.is_dir():
        raise UsageError(f"--capture-dir {base} is not a directory",
                         hint="give a directory (it is made if it does not exist)")
    stem = f"{label.replace(' ', '-')}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base / f"{stem}.pcap", 1
    while path.exists():
        n += 1
        path = base / f"{stem}-{n}.pcap"
    return path


def _run_interfaces(handle: LabHandle, server: str,
                    client: str | None) -> tuple[Interface, Interface | None]:
    """The server's and the client's interfaces a run uses (a node may have a device per
    link: the pair's shared segment, or the way out through routers)."""
    iface = handle.lab.node(server).rdma_interface
    if iface is None:
        raise UsageError(f"node {server} has no RDMA interface to capture on",
                         hint="choose a server with an RDMA device (--server)")
    peer = handle.lab.node(client).rdma_interface if client else None
    if client:
        from labctl.runners.pairs import pair_interfaces

        pair = pair_interfaces(handle.lab, server, client)
        if pair is not None:
            iface, peer = pair
    return iface, peer


def server_target(handle: LabHandle, server: str, client: str | None = None) -> CaptureTarget:
    """The server's RDMA interface of the run: one capture there sees both directions."""
    iface, _ = _run_interfaces(handle, server, client)
    return resolve(handle, server, iface.name)


@contextmanager
def capturing_run(handle: LabHandle, server: str, label: str, enabled: bool,
                  directory: Path | None, client: str | None = None,
                  target: CaptureTarget | None = None) -> Iterator[RunCapture | None]:
    """Capture on the server's RDMA interface around the block (nothing if not enabled);
    with `client`, the capture also says how many routers the client's packets passed."""
    if not enabled and directory is None:
        yield None
        return
    iface, peer = _run_interfaces(handle, server, client)
    target = target or resolve(handle, server, iface.name)
    with capturing(target, run_pcap_path(handle, label, directory)) as cap:
        yield cap
    if peer is not None:
        from labctl.wire.summary import measured_hops  # scapy: only when capturing

        cap.hops = measured_hops(cap.ttl, iface.address, peer.address)


Runner = Callable[[LabHandle, ExampleSpec, str, str, dict[str, Any]], RunResult]


def captured_runner(enabled: bool, directory: Path | None, *,
                    pair_in_name: bool = False) -> Runner:
    """run_example, each run in a capture of its own when asked (`run all --capture`,
    `--pairs`: with `pair_in_name`, each pcap's name also says SERVER-CLIENT)."""
    if not enabled and directory is None:
        return run_example

    # Resolved once per pair (in the Docker host VM each resolution is an ssh).
    targets: dict[tuple[str, str], CaptureTarget] = {}

    def run(handle: LabHandle, spec: ExampleSpec, server: str, client: str,
            options: dict[str, Any]) -> RunResult:
        if (server, client) not in targets:
            targets[server, client] = server_target(handle, server, client)
        label = f"{spec.name} {spec.variant}" + (f" {server}-{client}" if pair_in_name else "")
        with capturing_run(handle, server, label, True, directory, client,
                           targets[server, client]) as cap:
            result = run_example(handle, spec, server, client, options)
        result.capture = cap.record() if cap else None
        return result

    return run


def capture_line(result: RunResult) -> str:
    """One line per captured run for the text output: the pcap and its commonest opcodes."""
    record: Mapping[str, Any] = result.capture or {}
    opcodes = sorted(record.get("opcodes", {}).items(), key=lambda kv: (-kv[1], kv[0]))
    top = ", ".join(f"{name} {n}" for name, n in opcodes[:4])
    more = f", {len(opcodes) - 4} more" if len(opcodes) > 4 else ""
    return (f"capture {result.label}: {record.get('pcap')} ({record.get('packets', 0)} "
            f"packets{': ' + top + more if top else ''})")
