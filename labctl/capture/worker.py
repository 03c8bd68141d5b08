"""The capture child process: enter the lab's namespace, sniff one interface, write a pcap
or print one decoded line per packet.

Run as `python -m labctl.capture.worker NETNS DEVICE ...` by `labctl.capture.process`, never
by hand. It enters the namespace before importing scapy, so scapy's interface table is the
lab's. `--write=-` streams the pcap on stdout (its parent relays it), the global header at
once, so a reader knows the stream before the first packet. It says READY on stderr once
its socket is open and COUNT n when it ends; SIGTERM
(or SIGINT), or EOF on its stdin (its parent's pipe: the parent closed it, or died) stops it
cleanly with the pcap flushed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

READY = "READY"
COUNT = "COUNT"


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # scapy's sniff() ends its loop cleanly on this


def _watch_lifeline() -> None:
    """EOF on stdin: stop as on SIGTERM (delivered to the main thread, where sniff runs)."""
    with contextlib.suppress(OSError):
        while os.read(0, 4096):
            pass
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="labctl.capture.worker")
    parser.add_argument("netns")
    parser.add_argument("device")
    parser.add_argument("--write", default=None,
                        help="pcap file, or - for stdout; none: print lines")
    parser.add_argument("--absolute", action="store_true",
                        help="printed lines: wall-clock times, not seconds since the first")
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--duration", type=float, default=None)
    parser.add_argument("--filter", default=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = argument_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    threading.Thread(target=_watch_lifeline, daemon=True).start()

    from pyroute2 import netns

    netns.setns(args.netns)
    from scapy.all import PcapWriter, sniff
    from scapy.data import DLT_EN10MB

    from labctl.wire.decode import Decoder
    from labctl.wire.summary import Clock, line

    seen = [0]
    writer = None
    if args.write == "-":
        writer = PcapWriter(sys.stdout.buffer, linktype=DLT_EN10MB, sync=True)
        writer.write_header(None)  # a stream's reader waits for it before any packet
    elif args.write:
        writer = PcapWriter(args.write, linktype=DLT_EN10MB, sync=True)
    decoder = Decoder()
    clock = Clock(absolute=args.absolute)

    def on_packet(packet: Any) -> None:
        seen[0] += 1
        if writer is not None:
            writer.write(packet)
        else:
            print(line(decoder.feed(packet, seen[0]), clock), flush=True)

    def started() -> None:
        print(READY, file=sys.stderr, flush=True)

    try:
        sniff(iface=args.device, filter=args.filter or None, count=args.count,
              timeout=args.duration, prn=on_packet, store=False, started_callback=started)
    except (KeyboardInterrupt, BrokenPipeError):
        pass  # stopped, or whoever read our stdout is gone: either way the capture ends
    finally:
        if writer is not None:
            with contextlib.suppress(OSError):
                writer.close()
        print(f"{COUNT} {seen[0]}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # stopped while still starting: nothing captured
        print(f"{COUNT} 0", file=sys.stderr, flush=True)
        sys.exit(0)
    except Exception as exc:  # one line for the parent's error message, not a traceback
        print(f"capture failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
