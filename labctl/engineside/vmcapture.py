"""Capture one interface to a pcap stream on stdout: the Docker host VM's side of
`labctl capture` for docker labs whose engine is that VM (labctl/capture/process.py runs it
over the VM's ssh, inside the lab's namespace: `ip netns exec NETNS python3 -c BOOT ...`).

Standard library only (like dockernet.py): it runs with the VM image's python3. BOOT reads
this source from stdin (its length is in BOOT), so stdin stays open afterwards as the
lifeline: EOF on it (labctl closed its end, or labctl or its ssh died) ends the capture, as
do SIGTERM/SIGINT/SIGHUP, a closed stdout, --count and --duration. No capture outlives
the command that started it.

  DEVICE [--count N] [--duration S] [--filter N,CODE JT JF K,...]

--filter takes a BPF program already compiled (by libpcap on the host, for Ethernet; the
format of `tcpdump -ddd` on one line), attached to the socket before it is bound, so the
kernel drops what does not match. Output: a standard pcap (microsecond timestamps from the
kernel, link type Ethernet: the format scapy's PcapWriter writes for qemu labs), flushed
after each whole packet (a signal never cuts a record: it only wakes the loop). On stderr:
READY once the socket is bound, COUNT n when it ends, or one line "capture failed: ..." on
an error (exit 1).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass
from typing import BinaryIO

READY = "READY"
COUNT = "COUNT"
ETH_P_ALL = 0x0003
SO_ATTACH_FILTER = 26  # linux/asm-generic/socket.h
SO_TIMESTAMP = 29  # also SCM_TIMESTAMP: a struct timeval per packet
SNAPLEN = 262144  # libpcap's default (tcpdump -s 0): no frame is ever cut
LINKTYPE_ETHERNET = 1
PCAP_MAGIC = 0xA1B2C3D4  # microsecond timestamps, written in this machine's byte order


def _noted(signum: int, frame: object) -> None:
    """A stop signal: the wakeup fd (see capture) already woke the loop; nothing to do here."""


@dataclass
class Options:
    device: str
    count: int = 0
    duration: float | None = None
    bpf: str | None = None


def parse_args(argv: list[str]) -> Options:
    if not argv or argv[0].startswith("-"):
        raise ValueError("usage: DEVICE [--count N] [--duration S] [--filter PROGRAM]")
    options = Options(argv[0])
    rest = argv[1:]
    while rest:
        if len(rest) < 2:
            raise ValueError(f"{rest[0]} needs a value")
        flag, value, rest = rest[0], rest[1], rest[2:]
        if flag == "--count":
            options.count = int(value)
        elif flag == "--duration":
            options.duration = float(value)
        elif flag == "--filter":
            options.bpf = value
        else:
            raise ValueError(f"unknown option {flag}")
    return options


def filter_program(text: str) -> tuple[int, bytes]:
    """'N,code jt jf k,...' -> (N, the struct sock_filter array)."""
    parts = text.split(",")
    count = int(parts[0])
    insns = [tuple(int(x) for x in part.split()) for part in parts[1:]]
    if count != len(insns) or count == 0 or any(len(i) != 4 for i in insns):
        raise ValueError(f"bad BPF program {text[:60]!r}")
    return count, b"".join(struct.pack("=HBBI", *insn) for insn in insns)


def attach_filter(sock: socket.socket, text: str) -> None:
    import ctypes  # only for a filter: struct sock_fprog holds a pointer to the program

    count, program = filter_program(text)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("HL", count, ctypes.addressof(buffer))  # native layout and padding
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)  # the kernel copies it


def open_socket(device: str, bpf: str | None) -> socket.socket:
    # Protocol 0: nothing is queued before bind, so the filter applies to every packet.
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        if bpf:
            attach_filter(sock, bpf)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMP, 1)
        sock.bind((device, ETH_P_ALL))  # both directions of the interface
    except BaseException:
        sock.close()
        raise
    return sock


def pcap_header() -> bytes:
    return struct.pack("=IHHiIII", PCAP_MAGIC, 2, 4, 0, 0, SNAPLEN, LINKTYPE_ETHERNET)


def pcap_record(frame: bytes, seconds: int, micros: int) -> bytes:
    return struct.pack("=IIII", seconds, micros, len(frame), len(frame)) + frame


def stamp(ancillary: list[tuple[int, int, bytes]]) -> tuple[int, int]:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMP and len(data) >= 16:
            seconds, micros = struct.unpack_from("=qq", data)
            return seconds, micros
    now = time.time()
    return int(now), int((now % 1) * 1e6)


def capture(options: Options, out: BinaryIO, lifeline: int, woken: int) -> int:
    """Write packets to `out` until a limit, EOF on `lifeline` or a signal (a byte on
    `woken`, signal.set_wakeup_fd's pipe); the count."""
    sock = open_socket(options.device, options.bpf)
    deadline = None if options.duration is None else time.monotonic() + options.duration
    seen = 0
    try:
        out.write(pcap_header())
        out.flush()
        print(READY, file=sys.stderr, flush=True)
        watch = [sock.fileno(), lifeline, woken]
        space = socket.CMSG_SPACE(16)

        def take(flags: int = 0) -> None:
            nonlocal seen
            frame, ancillary, _flags, _addr = sock.recvmsg(SNAPLEN, space, flags)
            out.write(pcap_record(frame, *stamp(ancillary)))
            out.flush()
            seen += 1

        while not options.count or seen < options.count:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                break
            ready, _, _ = select.select(watch, [], [], wait)
            if woken in ready:
                break  # SIGTERM, SIGINT or SIGHUP
            if lifeline in ready and not os.read(lifeline, 4096):
                # labctl's end closed: keep what the kernel queued until now, then stop.
                with contextlib.suppress(BlockingIOError):
                    while not options.count or seen < options.count:
                        take(socket.MSG_DONTWAIT)
                break
            if sock.fileno() in ready:
                take()
    except BrokenPipeError:
        pass  # the reader went away: nothing more to write to
    finally:
        sock.close()
    return seen


def main(argv: list[str]) -> int:
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)  # a signal writes a byte here, even before the loop runs
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _noted)
    try:
        seen = capture(parse_args(argv), sys.stdout.buffer, sys.stdin.fileno(), woken)
    except (OSError, ValueError) as exc:
        print(f"capture failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        # A closed stdout must not make the interpreter's last flush print a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    with contextlib.suppress(OSError):
        print(f"{COUNT} {seen}", file=sys.stderr, flush=True)
    return 0


def bootstrap(source: str) -> str:
    """The `python3 -c` argument that reads `source` (UTF-8) from stdin and runs it."""
    size = len(source.encode())
    return (f"import sys; exec(compile(sys.stdin.buffer.read({size}), 'labctl-vmcapture', "
            "'exec'))")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
