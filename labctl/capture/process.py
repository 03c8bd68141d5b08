"""Start and stop capture children; `capturing()` records a run's traffic."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labctl.capture.target import CaptureTarget
from labctl.capture.worker import COUNT, READY
from labctl.errors import LabctlError

READY_TIMEOUT = 30.0  # importing scapy takes a few seconds on a loaded machine
STOP_GRACE = 5.0


class Capture:
    """One running capture child. Always `stop()` it (or use it as a context manager)."""

    def __init__(self, target: CaptureTarget, write: Path | None, *, count: int = 0,
                 duration: float | None = None, bpf: str | None = None) -> None:
        argv = [sys.executable, "-m", "labctl.capture.worker", target.netns, target.device]
        if write is not None:
            argv += ["--write", str(write)]
        if count:
            argv += ["--count", str(count)]
        if duration is not None:
            argv += ["--duration", str(duration)]
        if bpf:
            argv += ["--filter", bpf]
        self.target = target
        self.packets: int | None = None
        self._ready = threading.Event()
        self._errors: list[str] = []
        # Its own session: a terminal's Ctrl-C reaches us, and we stop the child in order.
        self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True, start_new_session=True)
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()

    def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        for raw in self._proc.stderr:
            text = raw.rstrip("\n")
            if text == READY:
                self._ready.set()
            elif text.startswith(COUNT + " "):
                self.packets = int(text.split()[1])
            elif text:
                self._errors.append(text)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.1):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise LabctlError(
                    f"capture on {self.target.node}:{self.target.ifname} did not start",
                    hint="\n".join(self._errors[-5:]) or "is the lab up?")

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the child to end by itself (count or duration reached)."""
        try:
            code = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._reader.join(2)
        return code

    def stop(self) -> None:
        """TERM, then KILL after a grace period: no child outlives this call."""
        if self._proc.poll() is None:
            try:
                os.kill(self._proc.pid, signal.SIGTERM)
                self._proc.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
            except ProcessLookupError:
                pass
        self._reader.join(2)

    @property
    def errors(self) -> list[str]:
        return list(self._errors)

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class RunCapture:
    """What `capturing()` hands back: the pcap, and after the block its opcode counts."""

    path: Path
    node: str
    ifname: str
    packets: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    ttl: list[dict[str, Any]] = field(default_factory=list)  # RoCE v2 packets by IP TTL
    hops: int | None = None  # routers between the run's client and server, as measured

    def record(self) -> dict[str, Any]:
        return {"pcap": str(self.path), "node": self.node, "interface": self.ifname,
                "packets": self.packets, "opcodes": self.counts, "ttl": self.ttl,
                "hops": self.hops}


@contextmanager
def capturing(target: CaptureTarget, path: Path) -> Iterator[RunCapture]:
    """Capture on `target` for the duration of the block; then count opcodes in the pcap.

    One tap is enough for a run between two nodes on a point-to-point link or a switch:
    the server's tap carries both directions of its traffic.
    """
    from labctl.capture.summary import opcode_counts, ttl_flows

    path.parent.mkdir(parents=True, exist_ok=True)
    result = RunCapture(path, target.node, target.ifname)
    with Capture(target, path) as cap:
        cap.wait_ready()
        try:
            yield result
        finally:
            time.sleep(0.5)  # the last ACKs are in flight when the programs exit
            cap.stop()
    result.packets = cap.packets or 0
    result.counts = opcode_counts(path)
    result.ttl = ttl_flows(path)
