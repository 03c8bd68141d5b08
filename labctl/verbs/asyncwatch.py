"""`ibv_asyncwatch` of rdma-core 56.1: print a device's async events as they come.

Everything here goes through the ctypes shim: pyverbs' AsyncEvent has no port number,
its Context no async FD, and its blocking get_async_event() keeps the GIL (no Ctrl-C).
We poll() the async FD in Python, so SIGINT/SIGTERM end the watch cleanly (exit 0).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

from labctl.verbs import tables as T
from labctl.verbs._getopt import ERROR, LongOpt, getopt_long

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType

PROG = "ibv_asyncwatch"
LONGOPTS = (
    LongOpt("ib-dev", True, "d"),
    LongOpt("help", False, "h"),
    LongOpt("json", False, "json"),  # ours
    LongOpt("exit-on-eof", False, "eof"),  # ours: end when stdin closes (labctl's ssh)
)


def usage(argv0: str = PROG) -> str:
    return (
        "Usage:\n"
        f"  {argv0}            start an asyncwatch process\n"
        "\n"
        "Options:\n"
        "  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)\n"
        "  -h, --help             print a help text and exit\n"
    )


def event_line(event_type: int, port: int) -> str:
    name = T.EVENT_NAMES.get(event_type, T.EVENT_UNEXPECTED)
    return f"  event_type {name} ({event_type}), port {port}\n"


class _Stop(Exception):
    pass


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def main(argv: list[str]) -> int:
    prog = PROG
    ib_devname: str | None = None
    as_json = False
    exit_on_eof = False
    for opt, arg in getopt_long(argv, "d:h", LONGOPTS, sys.stderr, prog):
        if opt == "d":
            ib_devname = arg
        elif opt == "json":
            as_json = True
        elif opt == "eof":
            exit_on_eof = True
        elif opt == "h":
            sys.stdout.write(usage(prog))
            return 0
        else:
            assert opt == ERROR
            sys.stdout.write(usage(prog))
            return 1

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    try:
        return _watch(ib_devname, as_json, exit_on_eof)
    except (_Stop, KeyboardInterrupt):
        return 0
    except BrokenPipeError:
        return 0


def _watch(ib_devname: str | None, as_json: bool, exit_on_eof: bool) -> int:
    from labctl.verbs import _libibverbs as lv

    out = sys.stdout
    try:
        dl = lv.DeviceList().__enter__()
    except lv.VerbsError as exc:
        sys.stderr.write(f"Failed to get IB devices list: {exc.strerror}\n")
        return 1
    chosen = None
    for ptr in dl.pointers:
        if ib_devname is None or dl.info(ptr).name == ib_devname:
            chosen = ptr
            break
    if chosen is None:
        sys.stderr.write(f"IB device {ib_devname or ''} not found\n")
        return 1
    name = dl.info(chosen).name
    try:
        ctx = lv.Context(chosen)
    except lv.VerbsError:
        sys.stderr.write(f"Couldn't get context for {name}\n")
        return 1
    fd = ctx.async_fd
    if as_json:
        import json

        out.write(json.dumps({"device": name, "async_fd": fd}) + "\n")
    else:
        out.write(f"{name}: async event FD {fd}\n")
    out.flush()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    stdin_fd = sys.stdin.fileno() if exit_on_eof and sys.stdin else -1
    if stdin_fd >= 0:
        poller.register(stdin_fd, select.POLLIN | select.POLLHUP)
    while True:
        ready = dict(poller.poll())
        if stdin_fd in ready:
            if not os.read(stdin_fd, 4096):
                return 0
            if fd not in ready:
                continue
        try:
            event_type, port = ctx.get_async_event()
        except lv.VerbsError:
            return 1
        if as_json:
            record = {
                "time": time.time(),
                "device": name,
                "event_type": T.EVENT_NAMES.get(event_type, T.EVENT_UNEXPECTED),
                "event": event_type,
                "port": port,
            }
            out.write(json.dumps(record) + "\n")
        else:
            out.write(event_line(event_type, port))
        out.flush()
