"""`labctl run ... --capture`: record a run's traffic on the server's data link."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from labctl.capture.process import RunCapture, capturing
from labctl.capture.target import resolve
from labctl.errors import UsageError
from labctl.lab.handle import LabHandle


def run_pcap_path(handle: LabHandle, label: str, directory: Path | None) -> Path:
    """DIRECTORY (or the lab directory's captures/)/EXAMPLE-VARIANT-TIME.pcap."""
    base = directory if directory is not None else handle.labdir.path / "captures"
    if base.exists() and not base.is_dir():
        raise UsageError(f"--capture-dir {base} is not a directory")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return base / f"{label.replace(' ', '-')}-{stamp}.pcap"


@contextmanager
def capturing_run(handle: LabHandle, server: str, label: str, enabled: bool,
                  directory: Path | None,
                  client: str | None = None) -> Iterator[RunCapture | None]:
    """Capture on the server's RDMA interface around the block (nothing if not enabled);
    with `client`, the capture also says how many routers the client's packets passed."""
    if not enabled and directory is None:
        yield None
        return
    iface = handle.lab.node(server).rdma_interface
    if iface is None:
        raise UsageError(f"node {server} has no RDMA interface to capture on")
    peer = handle.lab.node(client).rdma_interface if client else None
    if client:  # the interfaces the run uses (a node may have a device per link)
        from labctl.runners.pairs import pair_interfaces

        pair = pair_interfaces(handle.lab, server, client)
        if pair is not None:
            iface, peer = pair
    target = resolve(handle, server, iface.name)
    with capturing(target, run_pcap_path(handle, label, directory)) as cap:
        yield cap
    if peer is not None:
        from labctl.capture.summary import measured_hops  # scapy: only when capturing

        cap.hops = measured_hops(cap.ttl, iface.address, peer.address)
