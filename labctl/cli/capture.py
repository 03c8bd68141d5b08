"""`labctl capture`: record a lab link (pcap or live lines), decode a pcap, draw a ladder."""

from __future__ import annotations

import dataclasses
import os
import shlex
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import typer

from labctl.cli import complete
from labctl.cli.common import (
    LabOption,
    console,
    err_console,
    int_range,
    path_option,
    seconds,
)
from labctl.cli.safeprint import print_json
from labctl.errors import LabctlError, UsageError

DEFAULT_DURATION = 60.0  # a -w capture without --count or --duration stops after this
MAX_COUNT = 10**9  # packets: --count and --first


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM/SIGHUP end a capture like Ctrl-C does, so its child is always stopped.
    SIGINT too: a shell starts background jobs with SIGINT ignored."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM,
                                                      signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _record(endpoint: str, write: Path | None, count: int, duration: float | None,
            bpf: str | None, lab: str | None, absolute: bool) -> None:
    from labctl.capture.process import STDOUT, Capture
    from labctl.capture.target import check_filter, resolve
    from labctl.lab.handle import open_lab
    from labctl.topology.lookup import require_endpoint

    check_filter(bpf)
    streaming = write == STDOUT
    if streaming and sys.stdout.isatty():
        raise UsageError("-w - writes pcap bytes to stdout, which is a terminal",
                         hint=f"pipe it to a reader, e.g. `labctl capture "
                         f"{shlex.quote(endpoint)} -w - "
                         "| tcpdump -r -`; or -w FILE.pcap")
    # Fail here, before the child starts, if the file cannot be written (and make nothing);
    # --write's callback has checked the path itself.
    if write is not None and not streaming and not os.access(write.parent, os.W_OK):
        raise UsageError(f"cannot write {write}",
                         hint="give -w a file name in a directory you can write")
    handle = open_lab(lab)
    node, ifname = require_endpoint(handle.lab, endpoint)
    target = resolve(handle, node, ifname)
    # A file is bounded by default; a stream runs until Ctrl-C or until its reader exits.
    if write is not None and not streaming and not count and duration is None:
        duration = DEFAULT_DURATION
    bound = [f"{count} packets" if count else "", f"{duration:g} s" if duration else ""]
    with terminate_as_interrupt(), Capture(target, write, count=count, duration=duration,
                                            bpf=bpf, absolute=absolute) as cap:
        try:
            cap.wait_ready()
            # Printed once the socket is open: what is sent from now on is captured.
            err_console.print(
                f"capturing on {node}:{ifname} ({target.where})"
                f"{', up to ' + ' or '.join(b for b in bound if b) if any(bound) else ''}"
                "; Ctrl-C " + ("or the reader's exit stops" if streaming else "stops"))
            cap.wait()
        except KeyboardInterrupt:
            cap.stop()
    if cap.errors and cap.packets is None:
        raise LabctlError(cap.errors[-1], hint="see `labctl status`; is the node running?")
    packets = cap.packets or 0
    where = "stdout" if streaming else str(write)
    err_console.print(f"{packets} packets" + (f" written to {where}" if write else "")
                      + ("; the reader closed the stream" if cap.reader_gone else ""),
                      markup=False, soft_wrap=True)


def _decode(path: Path, first: int | None, ladder: Path | None, as_json: bool,
            absolute: bool) -> None:
    """Decode a pcap frame by frame: a line printed and counted per frame, none kept (a
    capture can be any size). A ladder draws its frames at once: at most MAX_LADDER.
    --json: a JSON object per frame per line (JSON Lines, as asyncwatch), for the same
    reason: one document would hold every frame; the counts are the reader's to make."""
    from collections import Counter

    from labctl.wire.summary import Clock, count, decode_file, iter_frames, line

    if ladder is not None:
        from labctl.wire.ladder import draw

        frames = decode_file(path, first)
        draw(frames, ladder)
        err_console.print(f"ladder of {len(frames)} packets written to {ladder}")
        return
    totals: Counter[str] = Counter()
    notes: list[str] = []
    clock = Clock(absolute=absolute)
    for frame in iter_frames(path, first, notes):
        if as_json:
            print_json(dataclasses.asdict(frame), indent=None, flush=True)
            continue
        console.print(line(frame, clock), markup=False, soft_wrap=True)
        count(totals, frame)
    if not as_json:
            console.print("counts: " + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())),
                      markup=False, soft_wrap=True)
    for note in notes:  # e.g. a capture cut short: its last packet is truncated
        err_console.print(f"note: {path}: {note}", markup=False, soft_wrap=True)


def capture(
    endpoint: str = typer.Argument(None, help="NODE:IF to capture on, e.g. node1:eth1.",
                                   metavar="NODE:IF", autocompletion=complete.endpoints),
    write: Path = typer.Option(None, "--write", "-w",
                               metavar="FILE.pcap", help="Write a pcap file, or - to stream "
                               "it to stdout (`-w - | wireshark -k -i -`); default: print "
                               "one decoded line per packet.",
                               callback=path_option("--write", "write")),
    count: int = typer.Option(0, "--count", "-c",
                              metavar="COUNT", help="Stop after this many packets "
                              f"(0: no limit; at most {MAX_COUNT}).",
                              callback=int_range("--count", 0, MAX_COUNT)),
    duration: float = typer.Option(None, "--duration",
                                   metavar="SECONDS", help="Stop after this many seconds "
                                   f"(with -w FILE and no --count: {DEFAULT_DURATION:g}).",
                                   callback=seconds("duration")),
    bpf: str = typer.Option(None, "--filter", "-f",
                            metavar="BPF", help="BPF filter, e.g. 'udp port 4791'."),
    decode: Path = typer.Option(None, "--decode", "-r",
                                metavar="FILE.pcap", help="Decode this pcap file instead "
                                "of capturing.", callback=path_option("--decode", "read")),
    ladder: Path = typer.Option(None, "--ladder",
                                metavar="FILE.png|FILE.svg", help="With --decode: draw a ladder "
                                "diagram to this .png or .svg file.",
                                callback=path_option("--ladder", "write")),
    first: int = typer.Option(None, "--first",
                              metavar="COUNT", help="With --decode: only the first N "
                              "packets (a ladder: default 40).",
                              callback=int_range("--first", 1, MAX_COUNT)),
    as_json: bool = typer.Option(False, "--json", help="With --decode: one JSON object per "
                                 "packet per line (docs/json.md)."),
    absolute: bool = typer.Option(False, "--absolute", help="Printed lines show wall-clock "
                                  "time (UTC, ISO 8601) instead of seconds since the first "
                                  "packet."),
    lab: str = LabOption,
) -> None:
    """See RDMA on the wire: capture a node's link from the lab's side, or decode a pcap
    (RoCE v2 BTH/RETH/AETH/DETH, RDMA CM MADs, iWARP MPA/DDP/RDMAP)."""
    if write is not None and str(write) == "-" and (as_json or decode is not None):
        raise UsageError("-w - streams the pcap to stdout; "
                         + ("--json would print there too" if as_json
                            else "--decode reads a file"),
                         hint="capture with `-w - | tcpdump -r -`, or decode a file with "
                         "`labctl capture --decode FILE.pcap`")
    if absolute and (write is not None or as_json or ladder is not None):
        raise UsageError("--absolute changes the times of printed lines; a pcap, --json "
                         "and --ladder keep the capture's own times",
                         hint="e.g. `labctl capture --decode FILE.pcap --absolute`")
    if decode is not None:
        if endpoint is not None or write is not None:
            raise UsageError("--decode reads a file; it takes no NODE:IF or -w",
                         hint="e.g. `labctl capture --decode FILE.pcap`")
        if as_json and ladder is not None:
            raise UsageError("--json prints the packets; --ladder draws them",
                             hint="give one of them")
        from labctl.wire.ladder import MAX_LADDER, check_ladder_file  # no scapy imported

        if ladder is not None:
            check_ladder_file(ladder)
        if ladder is not None and first is not None and first > MAX_LADDER:
            raise UsageError(f"--ladder draws at most {MAX_LADDER} packets (--first {first})",
                             hint=f"e.g. --first {MAX_LADDER}; or decode without --ladder")
        _decode(decode, first if first is not None else (40 if ladder else None), ladder,
                as_json, absolute)
        return
    if ladder is not None or first is not None or as_json:
        raise UsageError("--ladder, --first and --json go with --decode FILE.pcap",
                         hint="capture with -w first, then decode the file")
    if endpoint is None:
        raise UsageError("give NODE:IF to capture on, or --decode FILE.pcap",
                         hint="e.g. labctl capture node1:eth1 -w run.pcap --count 200")
    _record(endpoint, write, count, duration, bpf, lab, absolute)


def register(app: typer.Typer) -> None:
    app.command()(capture)


# Options of `labctl run` commands (labctl/cli/run.py hands them to capturing_run).
CaptureOption = typer.Option(False, "--capture", help="Record the run's traffic (a pcap on "
                             "the server's link) and count packets per opcode in the record.")
CaptureDirOption = typer.Option(None, "--capture-dir",
                                metavar="DIR", help="Directory for --capture's pcap "
                                "(default: the lab directory's captures/); implies --capture.",
                                callback=path_option("--capture-dir", "dir"))
