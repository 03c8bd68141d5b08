"""A node-side helper that keeps pyverbs imported and forks one child per request.

Importing pyverbs costs seconds under TCG, ten times what `ibv_devinfo` itself takes. The
helper (`python3 -m labctl.verbs helper`, started by labctl/nodeside/start-helper.sh once
the lab is up) pays it once; `python3 -m labctl.verbs devinfo ...` then connects to its
unix socket and hands over its argv, its environment and its stdout/stderr file
descriptors (SCM_RIGHTS). A forked child runs the same `main()` as the direct path,
writing straight to those descriptors, so the bytes are the direct path's; the helper
answers with the exit status. When no helper listens (not started yet, still importing,
gone) the client falls back to running the command itself: the helper only changes how
fast the answer comes.

Protocol, one request per connection: the client sends b"LVH1\\0", then NUL-terminated
fields: the number of argv items, the argv items (the command first), then "KEY=VALUE"
environment items; the first chunk carries fds 1 and 2; the client then shuts down its
writing side. The helper replies "R <status>\\n" after the command ran, or "F <why>\\n"
without having run anything (the client then runs the command itself).

The client side is in the hot path of every run: it imports only `os`, `sys` and
`_socket` (not `socket`, whose enum classes cost ~0.2 s under TCG).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # no `typing` import at run time (startup cost under TCG)
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable, Mapping

SOCKET = "/run/labctl/verbs.sock"
MAGIC = b"LVH1\0"
# Commands the helper runs; asyncwatch streams until Ctrl-C and stays a process of its own.
COMMANDS: tuple[str, ...] = ("devinfo", "devices", "capture")
DIRECT_ENV = "LABCTL_VERBS_DIRECT"  # set to 1: never use the helper
AFTER_ENV = "LABCTL_HELPER_AFTER"  # a file: serve only once it exists (see wait_for)
PRELOADED = "/run/labctl/helper.preloaded"
VERBS_SYSFS = "/sys/class/infiniband_verbs"
MAX_REQUEST = 1 << 20
REQUEST_TIMEOUT = 10.0  # seconds a client may take to send its request


class ProtocolError(ValueError):
    pass


# ----------------------------------------------------------------------------- protocol
def encode_request(argv: list[str], env: Mapping[str, str]) -> bytes:
    fields = [str(len(argv)), *argv, *(f"{k}={v}" for k, v in env.items())]
    for field in fields:
        if "\0" in field:
            raise ProtocolError("NUL in an argument")
    return MAGIC + b"".join(os.fsencode(f) + b"\0" for f in fields)


def decode_request(data: bytes) -> tuple[list[str], dict[str, str]]:
    if not data.startswith(MAGIC):
        raise ProtocolError("not a labctl.verbs request (bad magic or version)")
    body = data[len(MAGIC):]
    if not body.endswith(b"\0"):
        raise ProtocolError("truncated request")
    fields = [os.fsdecode(f) for f in body[:-1].split(b"\0")]
    try:
        count = int(fields[0])
    except ValueError:
        raise ProtocolError("bad argument count") from None
    if count < 1 or count > len(fields) - 1:
        raise ProtocolError("bad argument count")
    argv = fields[1 : 1 + count]
    env: dict[str, str] = {}
    for item in fields[1 + count :]:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ProtocolError(f"bad environment item {item!r}")
        env[key] = value
    return argv, env


def decode_reply(data: bytes) -> int | None:
    """The command's exit status, or None: the helper ran nothing (run it directly)."""
    if data.startswith(b"F "):
        return None
    if data.startswith(b"R ") and data.endswith(b"\n"):
        try:
            return int(data[2:-1])
        except ValueError:
            pass
    raise ProtocolError(f"bad reply {data[:40]!r}")


def _fd_bytes(fds: tuple[int, ...]) -> bytes:
    return b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)


# ------------------------------------------------------------------------------- client
def call(
    argv: list[str], path: str | None = None, fds: tuple[int, int] = (1, 2),
    env: Mapping[str, str] | None = None,
) -> int | None:
    """Run argv (the command first) in the helper; None if it cannot (then run it here).

    fds: the stdout and stderr the command writes to (ours by default)."""
    path = path or SOCKET
    try:
        import _socket
    except ImportError:
        return None
    try:
        request = encode_request(argv, os.environ if env is None else env)
    except ProtocolError:
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        try:
            sock.connect(path)
        except OSError:
            return None  # no helper: not started, still importing pyverbs, or gone
        try:
            first = request[:65536]
            sent = sock.sendmsg(
                [first], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, _fd_bytes(fds))]
            )
            sock.sendall(request[sent:])
            sock.shutdown(_socket.SHUT_WR)
        except OSError:
            return None  # nothing ran yet (e.g. fd 1 or 2 closed): run it here
        reply = b""
        while True:
            try:
                chunk = sock.recv(256)
            except ConnectionResetError:
                # The helper closed before reading all of the request (too large, or it
                # ended), so it ran nothing. What came before it ("F ..." or nothing) is
                # the reply.
                if not reply:
                    return None
                break
            if not chunk:
                break
            reply += chunk
    except OSError as exc:
        sys.stderr.write(f"labctl.verbs: helper connection failed: {exc}\n")
        return 1
    finally:
        sock.close()
    if not reply:
        # The child may have printed part of the output already: running again would
        # print it twice. Fail the way a crashed direct run does.
        sys.stderr.write("labctl.verbs: the helper ended without an exit status\n")
        return 1
    try:
        return decode_reply(reply)
    except ProtocolError as exc:
        sys.stderr.write(f"labctl.verbs: {exc}\n")
        return 1


# ------------------------------------------------------------------------------- server
def preload() -> None:
    """Import what the commands need, pyverbs first: the cost the helper exists to pay once."""
    import io  # noqa: F401
    import json  # noqa: F401

    import pyverbs.device
    import pyverbs.pyverbs_error  # noqa: F401

    from labctl.verbs import _libibverbs, devices, devinfo  # noqa: F401


def warm_up() -> None:
    """One capture in the helper itself before any fork: libibverbs loads its providers
    and pyverbs its first-use state once, instead of in every child (0.1-0.5 s per request
    under TCG, against ~0.06-0.09 s warm). Nothing stays open; each child lists the devices
    anew, so devices made or removed later are seen."""
    import contextlib

    from labctl.verbs import devinfo

    with contextlib.suppress(Exception):  # no device, no pyverbs...: the children will say
        devinfo.capture(verbose=True)
    # What the imports and the capture freed goes back to the node, and from there (free
    # page reporting) to the host: the helper's anonymous memory 10.6 -> 9.6 MiB.
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # a libc without malloc_trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def device_signature(sysfs: str = VERBS_SYSFS) -> tuple[tuple[str, int, str], ...]:
    """What libibverbs keys its device list on: each uverbs device's name and the time its
    sysfs entry was made (`same_sysfs_dev` in rdma-core's init.c), with its device name.

    libibverbs keeps that list for the life of a process and adds a device found later at
    the list's head, so a helper that listed rxe0 at its start lists a new rxehy before it,
    where a fresh `ibv_devices` lists rxe0 first. A helper whose devices changed therefore
    starts again (serve()); comparing this signature costs a directory read per request."""
    try:
        names = sorted(n for n in os.listdir(sysfs) if n.startswith("uverbs"))
    except OSError:
        return ()
    found = []
    for name in names:
        entry = f"{sysfs}/{name}"
        try:
            made = os.stat(entry).st_mtime_ns
            with open(f"{entry}/ibdev", encoding="utf-8", errors="replace") as handle:
                ibdev = handle.read(256).strip()
        except OSError:  # removed while being read: the next request sees the change
            continue
        found.append((name, made, ibdev))
    return tuple(found)


def restart(path: str) -> None:
    """Run this helper anew (same interpreter, arguments and environment): a fresh
    libibverbs lists the devices as a fresh C tool does. The listening socket and the
    instance lock are close-on-exec, so clients fall back to the direct path until the
    new helper listens, and it takes the lock again. Never returns."""
    try:
        if os.path.lexists(path):
            os.unlink(path)  # no client waits on a socket that nobody accepts on
        os.execv(sys.executable, sys.orig_argv)
    except OSError as exc:
        sys.stderr.write(f"labctl.verbs helper: cannot restart: {exc}\n")
    os._exit(1)  # the clients run their commands themselves


def serve(path: str, run: Callable[[list[str]], int], devices: object = None,
          signature: Callable[[], object] = device_signature,
          on_change: Callable[[str], None] = restart) -> None:
    """Accept requests forever, one forked child per request.

    `run(argv)` executes a command in the child (labctl.verbs' dispatcher). The socket is
    bound only after everything is imported, so a client never waits for it. When the
    node's RDMA devices are no longer `devices` (`signature()` before the warm-up listed
    them; taken here if not given), the request is refused (the client runs it itself)
    and the helper starts again (`on_change(path)`, which does not return).
    """
    import contextlib
    import signal
    import socket

    if devices is None:
        devices = signature()
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    tmp = f"{path}.{os.getpid()}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o077)  # root only, like the devices
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        listener.bind(tmp)
    finally:
        os.umask(old_umask)
    listener.listen(16)
    os.replace(tmp, path)  # atomically: a client sees a listening socket or none
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    while True:
        try:
            conn, _ = listener.accept()
        except InterruptedError:
            continue
        try:
            if signature() != devices:
                conn.sendall(b"F the node's RDMA devices changed; the helper restarts\n")
                conn.close()
                listener.close()
                on_change(path)
            _handle(conn, listener, run)
        except Exception as exc:  # one bad client must not end the helper
            sys.stderr.write(f"labctl.verbs helper: {exc}\n")
        finally:
            conn.close()


def _receive(conn: socket.socket) -> tuple[bytes, list[int]]:
    import array
    import socket

    fds = array.array("i")
    data = b""
    conn.settimeout(REQUEST_TIMEOUT)
    while True:
        room = socket.CMSG_SPACE(fds.itemsize * 4)
        chunk, ancdata, _flags, _addr = conn.recvmsg(65536, room)
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                usable = len(payload) - len(payload) % fds.itemsize
                fds.frombytes(payload[:usable])
        if not chunk:
            return data, list(fds)
        data += chunk
        if len(data) > MAX_REQUEST:
            for fd in fds:
                os.close(fd)
            raise ProtocolError("request too large")


def _handle(conn: socket.socket, listener: socket.socket,
            run: Callable[[list[str]], int]) -> None:
    try:
        data, fds = _receive(conn)
    except ProtocolError as exc:  # too large: the client runs the command itself
        conn.sendall(f"F {exc}\n".encode())
        return
    try:
        argv, env = decode_request(data)
        if len(fds) != 2:
            raise ProtocolError(f"expected 2 file descriptors, got {len(fds)}")
        if argv[0] not in COMMANDS:
            raise ProtocolError(f"not a helper command: {argv[0]!r}")
    except ProtocolError as exc:
        conn.sendall(f"F {exc}\n".encode())
        for fd in fds:
            os.close(fd)
        return
    pid = os.fork()
    if pid == 0:  # the child: never returns
        status = 1
        try:
            listener.close()
            status = _child(argv, env, fds, run)
        finally:
            try:
                conn.sendall(f"R {status}\n".encode())
            finally:
                os._exit(0)
    for fd in fds:
        os.close(fd)


def _child(argv: list[str], env: dict[str, str], fds: list[int],
           run: Callable[[list[str]], int]) -> int:
    import signal

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.environ.clear()
    os.environ.update(env)  # POSIXLY_CORRECT & co, as the client has them
    # Fresh text streams on the new fds 1 and 2, as a process of its own would have.
    import io

    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape",
                                  line_buffering=(fd == 2))
        setattr(sys, name, stream)
    try:
        status = run(argv)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()  # onto the client's stderr, as a direct run would
        status = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        pass
    return status & 0xFF


def wait_for(path: str) -> None:
    """A machine saved for restores (labctl/vm/saved.py): its helper imports before the
    save, says so (PRELOADED, for start-helper.sh's reclaim), then waits until the restored
    node has its devices and node-init.sh makes `path`."""
    import time

    with open(PRELOADED, "w"):
        pass
    while not os.path.exists(path):
        time.sleep(0.05)


def single_instance_lock(path: str) -> int | None:
    """Hold `PATH.lock` for the helper's life; None if another helper holds it.

    A second helper would replace the first one's socket and leave it running unreachable
    (labctl starts the helper after every bring-up, repairs included). The lock goes with
    the process: a killed helper never blocks the next one."""
    import fcntl

    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def main(argv: list[str], run: Callable[[list[str]], int]) -> int:
    """`python3 -m labctl.verbs helper [SOCKET]`: import pyverbs, then serve until killed;
    `run` is the dispatcher of labctl.verbs (passed in: no import cycle)."""
    path = argv[1] if len(argv) > 1 else SOCKET
    if os.environ.get(DIRECT_ENV) == "1":
        sys.stderr.write(f"labctl.verbs helper: {DIRECT_ENV}=1, not serving\n")
        return 2
    import contextlib

    lock = single_instance_lock(path)
    if lock is None:
        sys.stderr.write(f"labctl.verbs helper: one already serves {path}\n")
        return 0
    preload()
    after = os.environ.get(AFTER_ENV)
    if after:
        wait_for(after)
    devices = device_signature()  # before the warm-up lists them (see device_signature)
    warm_up()
    # Started at low priority so that it does not slow the node's bring-up; the children
    # it forks do the user's work at normal priority.
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    serve(path, run, devices)
    return 0
