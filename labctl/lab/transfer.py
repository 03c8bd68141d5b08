"""Copying files and directories between the host and a node (`labctl cp`).

A tar stream through the node's exec channel (ssh for VMs, `docker exec -i` for
containers): one round trip, any size, directories whole. Both ends follow cp's rules: a
destination that is a directory receives SRC under its own name; otherwise SRC lands at
DST (a file replaced, a directory created). Nothing half-copied is left at DST: the stream
is unpacked into a temporary directory beside it, then renamed into place.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from labctl.errors import LabctlError, UsageError, short_repr
from labctl.lab.handle import LabHandle
from labctl.lab.unpack import (
    HostFilter,
    Room,
    UnreadableArchive,
    current_umask,
    describe_skipped,
    place,
    refuse_special,
    top_name,
    unpack,
)

# NODE:PATH. A host path that looks like one is written ./node1:x (or absolute).
_REMOTE_RE = re.compile(r"([a-z][a-z0-9-]{0,14}):(.*)", re.DOTALL)
SOURCE_MISSING = 3  # the node scripts' exit status for "no such file" (bad input, exit 2)
_STDERR_BYTES = 64 << 10  # what of the node side's stderr a message shows
_WAIT_AFTER_FAILURE = 5.0  # seconds for the node side to end (and say why) on its own
_TRAILER_BYTES = 1 << 20  # tar's end-of-archive padding: a record is 10 KiB

# In the node: $1 = DST, $2 = the archive's top name. Values arrive as arguments (ssh
# quotes each), never inside the script text.
_UNPACK = r'''
set -eu
dst=$1; name=$2
missing() { echo "labctl cp: $1: no such directory in the node" >&2; exit 3; }
case $dst in */) [ -d "$dst" ] || missing "$dst" ;; esac
if [ -d "$dst" ]; then exec tar -xf - --no-same-owner -C "$dst"; fi
parent=$(dirname -- "$dst")
[ -d "$parent" ] || missing "$parent"
tmp=$(mktemp -d "$parent/.labctl-cp.XXXXXX")
trap 'rm -rf -- "$tmp"' EXIT
tar -xf - --no-same-owner -C "$tmp"
mv -f -T -- "$tmp/$name" "$dst"
'''
# In the node: $1 = SRC; the archive holds it under its own name.
_PACK = r'''
set -eu
src=$1
if [ ! -e "$src" ] && [ ! -L "$src" ]; then
    echo "labctl cp: $src: no such file or directory in the node" >&2; exit 3
fi
cd -- "$(dirname -- "$src")"
# A SRC that is a link is copied as what it points to (as scp does; the host takes no
# link that leaves SRC).
if [ -L "$src" ]; then exec tar -chf - -- "$(basename -- "$src")"; fi
exec tar -cf - -- "$(basename -- "$src")"
'''


@dataclass(frozen=True)
class CopyRequest:
    node: str
    node_path: str  # absolute in the node
    host_path: str  # as given (relative to the working directory)
    to_node: bool  # host -> node, else node -> host


def split_location(arg: str) -> tuple[str | None, str]:
    """("node1", "/tmp/x") for "node1:/tmp/x"; (None, arg) for a host path."""
    match = _REMOTE_RE.fullmatch(arg)
    if match is None:
        return None, arg
    return match.group(1), match.group(2)


def _check_node_path(path: str, what: str) -> str:
    if not path:
        raise UsageError(f"{what}: the node path is empty",
                         hint="write NODE:/absolute/path, e.g. node1:/root/src")
    if any(ch in path for ch in "\0\n"):
        raise UsageError(f"{what}: the node path {short_repr(path)} holds a control character",
                         hint="name the file without control characters")
    if not path.startswith("/"):
        raise UsageError(f"{what}: the node path {short_repr(path)} is not absolute",
                         hint="write NODE:/absolute/path, e.g. node1:/root/src")
    if posixpath.normpath(path) == "/":
        raise UsageError(f"{what}: cannot copy the node's whole root directory" if what == "SRC"
                         else f"{what}: give a directory or file under /, e.g. node1:/root/",
                         hint="name a directory or file")
    if what == "SRC" and top_name(path) in (".", ".."):
        # its name would be the host's "." or "..": DST's own entries, or its parent's
        raise UsageError(f"SRC: {short_repr(path)} ends in {top_name(path)!r}",
                         hint="name the directory itself, e.g. node1:"
                         f"{posixpath.normpath(path)}")
    return path


def parse_copy(src: str, dst: str) -> CopyRequest:
    """Which way the copy goes; UsageError unless exactly one side is NODE:PATH."""
    src_node, src_path = split_location(src)
    dst_node, dst_path = split_location(dst)
    if src_node and dst_node:
        raise UsageError("copying from node to node is not supported",
                         hint=f"copy to the host first: `labctl cp {src} ./tmp`, then "
                         f"`labctl cp ./tmp {dst}`")
    if src_node is None and dst_node is None:
        raise UsageError("one of SRC and DST must be NODE:PATH",
                         hint="e.g. `labctl cp ./src node1:/root/src` or "
                         "`labctl cp node1:/root/out.txt .` (a host path with a colon: ./a:b)")
    if src_node:
        if not dst_path:
            raise UsageError("DST: the host path is empty", hint="e.g. . for here")
        return CopyRequest(src_node, _check_node_path(src_path, "SRC"), dst_path, False)
    assert dst_node is not None
    if not src_path:
        raise UsageError("SRC: the host path is empty", hint="e.g. ./file")
    return CopyRequest(dst_node, _check_node_path(dst_path, "DST"), src_path, True)


def _fail(result_code: int, node: str, stderr: str, what: str) -> LabctlError:
    message = stderr.strip() or f"exit {result_code}"
    if result_code == SOURCE_MISSING:
        return UsageError(message, hint=f"check the path with `labctl exec {node} -- ls -la "
                          "DIR`")
    return LabctlError(f"{what} failed: {message}",
                       hint="is there room on the destination, and is the node running "
                       "(`labctl status`)?")


def _pipe(producer: list[str], consumer: list[str],
          timeout: float) -> tuple[int, int, str, str]:
    """Run `producer | consumer`; their exit codes and their stderr texts."""
    with tempfile.TemporaryFile() as err_a, tempfile.TemporaryFile() as err_b:
        first = subprocess.Popen(producer, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=err_a)
        assert first.stdout is not None
        try:
            second = subprocess.Popen(consumer, stdin=first.stdout,
                                      stdout=subprocess.DEVNULL, stderr=err_b)
        except OSError:
            first.kill()
            first.wait()
            raise
        first.stdout.close()  # the consumer holds the only reader: a dead one stops tar
        try:
            code_b = second.wait(timeout)
            code_a = first.wait(timeout)
        except subprocess.TimeoutExpired:
            for proc in (first, second):
                proc.kill()
                proc.wait()
            raise LabctlError(f"the copy did not finish in {timeout:.0f} s",
                              hint="a large tree over a TCG node is slow: try --timeout") \
                from None
        err_a.seek(0)
        err_b.seek(0)
        text_a = err_a.read().decode(errors="replace")
        text_b = err_b.read().decode(errors="replace")
    return code_a, code_b, text_a, text_b


def copy_to_node(handle: LabHandle, request: CopyRequest, timeout: float) -> str:
    """Host file or directory -> node; returns where it landed (as the request said)."""
    source = Path(os.path.abspath(request.host_path))
    if not source.exists() and not source.is_symlink():
        raise UsageError(f"{short_repr(request.host_path)}: no such file or directory",
                         hint="give an existing host file or directory as SRC")
    if source == Path("/"):
        raise UsageError("cannot copy the host's whole root directory",
                         hint="copy the directory you need")
    pack = ["tar", "-cf", "-", "-C", str(source.parent), "--", source.name]
    unpack = handle.argv(request.node, ["sh", "-c", _UNPACK, "sh", request.node_path,
                                        source.name])
    code_pack, code_unpack, pack_errors, unpack_errors = _pipe(pack, unpack, timeout)
    if code_unpack != 0:
        raise _fail(code_unpack, request.node, unpack_errors, f"copy to {request.node}")
    if code_pack != 0:
        raise LabctlError(f"reading {request.host_path} failed: {pack_errors.strip()}",
                          hint="check the file's permissions")
    return f"{request.node}:{request.node_path}"


def _receive(pack: list[str], into: Path, host_filter: HostFilter,
             timeout: float) -> tuple[int, str, LabctlError | None]:
    """Run the node's `tar -c` and unpack its stream here, in-process (labctl's own filter
    rather than the host's tar: a root tar keeps setuid bits and makes device files).
    Returns the node side's exit code, the start of its stderr and the unpacking's error:
    the node's own failure (no such SRC: an empty stream) explains more than the latter."""
    timed_out = threading.Event()
    with tempfile.TemporaryFile() as errors:
        producer = subprocess.Popen(pack, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=errors)
        assert producer.stdout is not None

        def expire() -> None:
            timed_out.set()
            producer.kill()  # the stream ends: unpack() sees a truncated archive

        timer = threading.Timer(timeout, expire)
        timer.start()
        failure: LabctlError | None = None
        try:
            unpack(producer.stdout, into, host_filter)
            # tar pads its last record: read it so that the node side ends cleanly.
            producer.stdout.read(_TRAILER_BYTES)
        except LabctlError as error:
            failure = error
        finally:
            timer.cancel()
            producer.stdout.close()  # a node side still writing gets EPIPE and ends
            try:
                code = producer.wait(_WAIT_AFTER_FAILURE if failure else None)
            except subprocess.TimeoutExpired:
                producer.kill()
                code = producer.wait()
        if timed_out.is_set():
            raise LabctlError(f"the copy did not finish in {timeout:.0f} s",
                              hint="a large tree over a TCG node is slow: try --timeout")
        errors.seek(0)
        text = errors.read(_STDERR_BYTES).decode(errors="replace")
    return code, text, failure


def copy_from_node(handle: LabHandle, request: CopyRequest, timeout: float,
                   room: Room | None = None) -> tuple[str, str | None]:
    """Node file or directory -> host; returns the host path it landed at and, if the
    node sent device files or FIFOs (skipped), a sentence saying so. The stream is
    unpacked into a temporary directory beside the destination, then moved into place:
    a refused or broken copy leaves nothing at DST. `room`: the destination's free space
    (the tests give it)."""
    node_src = request.node_path.rstrip("/") or "/"
    name = top_name(node_src)
    if name in ("", ".", ".."):
        raise UsageError(f"SRC: {short_repr(request.node_path)} names no file or directory "
                         "of its own", hint="name the directory itself")
    target = Path(os.path.abspath(request.host_path))
    if target.is_dir():
        final = target / name
    else:
        if request.host_path.endswith("/"):
            raise UsageError(f"{short_repr(request.host_path)}: no such directory",
                             hint="make it first, or leave out the trailing /")
        if not target.parent.is_dir():
            raise UsageError(f"{short_repr(str(target.parent))}: no such directory",
                             hint="DST's directory must exist")
        final = target
    refuse_special(final, request.host_path)
    host_filter = HostFilter(top=name, room=room or Room.of(final.parent),
                             umask=current_umask())
    temp = Path(tempfile.mkdtemp(prefix=".labctl-cp.", dir=final.parent))
    try:
        pack = handle.argv(request.node, ["sh", "-c", _PACK, "sh", node_src])
        code_pack, pack_errors, failure = _receive(pack, temp, host_filter, timeout)
        # an empty or cut stream from a node side that failed: its message says why
        if failure is not None and not (isinstance(failure, UnreadableArchive)
                                        and code_pack != 0):
            raise failure
        if code_pack != 0:
            raise _fail(code_pack, request.node, pack_errors, f"copy from {request.node}")
        unpacked = temp / name
        if unpacked.parent != temp or not os.path.lexists(unpacked):
            raise LabctlError(f"the node sent no {short_repr(name)}",
                              hint="is SRC readable in the node?")
        place(unpacked, final)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    skipped = describe_skipped(host_filter.skipped) if host_filter.skipped else None
    return str(final), skipped
