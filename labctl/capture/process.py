"""Start and stop capture children; `capturing()` records a run's traffic."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO, Any, BinaryIO

from labctl.bounded import parse_int
from labctl.capture.target import VM, CaptureTarget
from labctl.capture.worker import COUNT, READY
from labctl.engineside import vmcapture
from labctl.errors import LabctlError
from labctl.wire.capture_record import CaptureRecord, TtlFlow

# Importing scapy takes seconds on a loaded machine; an ssh and python3 in the Docker host VM
# (one vCPU under TCG) took over 30 s while a busy container shared that vCPU.
READY_TIMEOUT = 120.0
STOP_GRACE = 5.0
STDOUT = Path("-")  # `-w -`: the pcap goes to our stdout, relayed as it comes
CHUNK = 1 << 16


class Capture:
    """One running capture child. Always `stop()` it (or use it as a context manager).

    The child is the worker (labctl/capture/worker.py) when the lab's namespace is on this
    host, or an ssh into the Docker host VM running vmcapture.py there, whose pcap stream
    comes back on the ssh's stdout: into the file, or through a decoder that prints lines.
    Either way the child's stdin is a pipe from us, its lifeline: closing it stops the
    capture cleanly, and so does our death (the pipe closes with us).

    `write` STDOUT: the child's pcap stream (the worker's `--write=-`, or the ssh's stdout)
    is relayed to `sink` (our stdout) chunk by chunk, flushed; when the reader of `sink`
    goes away (EPIPE, or POLLERR on the pipe while no packet comes), `reader_gone` is set
    and the capture is stopped like Ctrl-C stops it.
    """

    def __init__(self, target: CaptureTarget, write: Path | None, *, count: int = 0,
                 duration: float | None = None, bpf: str | None = None,
                 absolute: bool = False, sink: BinaryIO | None = None) -> None:
        self.target = target
        self.packets: int | None = None
        self.reader_gone = False
        self._sink = sink if sink is not None else sys.stdout.buffer
        self._absolute = absolute
        self._ready = threading.Event()
        self._errors: list[str] = []
        self._printer: threading.Thread | None = None
        self._watcher: threading.Thread | None = None
        limits: list[str] = []
        if count:
            limits += ["--count", str(count)]
        if duration is not None:
            limits += ["--duration", str(duration)]
        if target.engine == VM:
            self._proc = self._start_in_vm(write, limits, bpf)
        else:
            # A value is never read as an option: --opt=VALUE (a file named -x.pcap), and
            # the positional arguments after "--".
            argv = [sys.executable, "-m", "labctl.capture.worker", *limits]
            if write is not None:
                argv.append(f"--write={write}")  # STDOUT is "-": the worker's stdout
            elif absolute:
                argv.append("--absolute")
            if bpf:
                argv.append(f"--filter={bpf}")
            argv += ["--", target.netns, target.device]
            self._proc = self._popen(argv, subprocess.PIPE if write == STDOUT else None)
            if write == STDOUT:
                self._start_relay()
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()

    @staticmethod
    def _popen(argv: list[str], stdout: Any) -> subprocess.Popen[bytes]:
        # Its own session: a terminal's Ctrl-C reaches us, and we stop the child in order.
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=stdout,
                                stderr=subprocess.PIPE, start_new_session=True)

    def _start_in_vm(self, write: Path | None, limits: list[str],
                     bpf: str | None) -> subprocess.Popen[bytes]:
        from labctl.capture.target import compiled_filter
        from labctl.dockerhost.vm import DockerHostVM

        source = resources.files("labctl.engineside").joinpath("vmcapture.py").read_text()
        program = ["--filter", compiled_filter(bpf)] if bpf else []
        command = ["ip", "netns", "exec", self.target.netns, "python3", "-c",
                   vmcapture.bootstrap(source), self.target.device, *limits, *program]
        argv = DockerHostVM().ssh_argv(command)
        if write is None:
            proc = self._popen(argv, subprocess.PIPE)
            self._printer = threading.Thread(target=_print_stream,
                                             args=(proc.stdout, self._absolute), daemon=True)
            self._printer.start()
        elif write == STDOUT:
            proc = self._popen(argv, subprocess.PIPE)
            self._proc = proc
            self._start_relay()
        else:
            with open(write, "wb") as out:  # the child holds it open; we need not
                proc = self._popen(argv, out)
        assert proc.stdin is not None
        try:
            proc.stdin.write(source.encode())
            proc.stdin.flush()
        except BrokenPipeError:
            pass  # the ssh died at once: its stderr says why (wait_ready reports it)
        return proc

    def _start_relay(self) -> None:
        self._printer = threading.Thread(target=self._relay, daemon=True)
        self._printer.start()
        self._watcher = threading.Thread(target=self._watch_reader, daemon=True)
        self._watcher.start()

    def _relay(self) -> None:
        """Copy the child's pcap stream to the sink as it comes. After the reader went
        away, keep draining (a child blocked on a full pipe could not stop)."""
        assert self._proc.stdout is not None
        source = self._proc.stdout.fileno()
        while chunk := os.read(source, CHUNK):
            if self.reader_gone:
                continue
            try:
                self._sink.write(chunk)
                self._sink.flush()
            except (BrokenPipeError, ValueError):  # ValueError: the sink was closed
                self._reader_went_away()

    def _watch_reader(self) -> None:
        """A pipe's reader that exits while no packet comes is seen only by poll (POLLERR
        on our end): without this, `-w - | tcpdump -c 1` would wait for the next packet."""
        try:
            fd = self._sink.fileno()
        except (OSError, ValueError):
            return
        poller = select.poll()
        poller.register(fd, 0)  # POLLERR and POLLHUP are reported without asking
        while self._proc.poll() is None and not self.reader_gone:
            # (not POLLNVAL: a descriptor closed under us says nothing of the reader)
            if any(events & (select.POLLERR | select.POLLHUP)
                   for _, events in poller.poll(200)):
                self._reader_went_away()

    def _reader_went_away(self) -> None:
        if self.reader_gone:
            return
        self.reader_gone = True
        # Our later flushes (the interpreter's last one too) must not fail on the dead
        # pipe: the sink's descriptor now writes to /dev/null.
        with contextlib.suppress(OSError, ValueError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._sink.fileno())
            os.close(null)
        with contextlib.suppress(OSError):  # the lifeline: the child ends as on Ctrl-C
            assert self._proc.stdin is not None
            self._proc.stdin.close()

    def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        for raw in self._proc.stderr:
            text = raw.decode(errors="replace").rstrip("\n")
            if text == READY:
                self._ready.set()
            elif text.startswith(COUNT + " "):
                # the capture process may run in a Docker host VM: its count is read bounded
                with contextlib.suppress(ValueError, IndexError):
                    self.packets = parse_int(text.split()[1], "a packet count", low=0)
            elif text:
                self._errors.append(text)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.1):
            ended = self._proc.poll() is not None
            if ended or time.monotonic() > deadline:
                self.stop()
                why = "" if ended else f" within {timeout:g} s"
                raise LabctlError(
                    f"capture on {self.target.node}:{self.target.ifname} ({self.target.where}) "
                    f"did not start{why}",
                    hint="\n".join(self._errors[-5:]) or "is the lab up? see `labctl status`")

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the child to end by itself (count or duration reached)."""
        try:
            code = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._join()
        return code

    def stop(self) -> None:
        """Close the lifeline, then TERM, then KILL, each after a grace period: no child
        outlives this call (nor, in the VM, its capture: it ends at its stdin's EOF)."""
        if self._proc.poll() is None:
            with contextlib.suppress(OSError):  # a child that is gone closed it already
                assert self._proc.stdin is not None
                self._proc.stdin.close()
            try:
                self._proc.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self._proc.pid, signal.SIGTERM)
                try:
                    self._proc.wait(STOP_GRACE)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self._proc.pid, signal.SIGKILL)
                    self._proc.wait()
        self._join()

    def _join(self) -> None:
        with contextlib.suppress(OSError):
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        self._reader.join(2)
        if self._printer is not None:
            self._printer.join(5)
        if self._watcher is not None:  # it ends within a poll once the child has ended
            self._watcher.join(2)

    @property
    def errors(self) -> list[str]:
        return list(self._errors)

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _print_stream(stream: IO[bytes], absolute: bool) -> None:
    """Decode a pcap stream as it arrives: one line per packet (as the worker prints)."""
    from scapy.error import Scapy_Exception
    from scapy.utils import PcapReader

    from labctl.wire.decode import Decoder
    from labctl.wire.summary import Clock, line

    decoder = Decoder()
    clock = Clock(absolute=absolute)
    try:
        with PcapReader(stream) as reader:  # type: ignore[arg-type]  # a stream works too
            for index, packet in enumerate(reader, start=1):
                print(line(decoder.feed(packet, index), clock), flush=True)
    except (Scapy_Exception, EOFError, OSError):
        pass  # no stream (the capture failed: its stderr says why) or a cut last record


@dataclass
class RunCapture:
    """What `capturing()` hands back: the pcap, and after the block its opcode counts."""

    path: Path
    node: str
    ifname: str
    packets: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    ttl: list[TtlFlow] = field(default_factory=list)  # RoCE v2 packets by IP TTL
    hops: int | None = None  # routers between the run's client and server, as measured

    def record(self) -> CaptureRecord:
        return {"pcap": str(self.path), "node": self.node, "interface": self.ifname,
                "packets": self.packets, "opcodes": self.counts, "ttl": self.ttl,
                "hops": self.hops}


@contextmanager
def capturing(target: CaptureTarget, path: Path) -> Iterator[RunCapture]:
    """Capture on `target` for the duration of the block; then count opcodes in the pcap.

    One tap is enough for a run between two nodes on a point-to-point link or a switch:
    the server's tap carries both directions of its traffic.
    """
    from labctl.wire.summary import opcode_counts, ttl_flows

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
