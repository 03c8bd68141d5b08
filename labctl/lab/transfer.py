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
from dataclasses import dataclass
from pathlib import Path

from labctl.errors import LabctlError, UsageError, short_repr
from labctl.lab.handle import LabHandle

# NODE:PATH. A host path that looks like one is written ./node1:x (or absolute).
_REMOTE_RE = re.compile(r"([a-z][a-z0-9-]{0,14}):(.*)", re.DOTALL)
SOURCE_MISSING = 3  # the node scripts' exit status for "no such file" (bad input, exit 2)

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
        raise UsageError(f"{what}: the node path {short_repr(path)} holds a control character")
    if not path.startswith("/"):
        raise UsageError(f"{what}: the node path {short_repr(path)} is not absolute",
                         hint="write NODE:/absolute/path, e.g. node1:/root/src")
    if posixpath.normpath(path) == "/":
        raise UsageError(f"{what}: cannot copy the node's whole root directory" if what == "SRC"
                         else f"{what}: give a directory or file under /, e.g. node1:/root/",
                         hint="name a directory or file")
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
        raise UsageError("SRC: the host path is empty")
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
        raise UsageError(f"{short_repr(request.host_path)}: no such file or directory")
    if source == Path("/"):
        raise UsageError("cannot copy the host's whole root directory")
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


def copy_from_node(handle: LabHandle, request: CopyRequest, timeout: float) -> str:
    """Node file or directory -> host; returns the host path it landed at."""
    node_src = request.node_path.rstrip("/") or "/"
    name = posixpath.basename(node_src)
    target = Path(os.path.abspath(request.host_path))
    if target.is_dir():
        into, final = target, target / name
        temp: Path | None = None
    else:
        if request.host_path.endswith("/"):
            raise UsageError(f"{short_repr(request.host_path)}: no such directory")
        if not target.parent.is_dir():
            raise UsageError(f"{short_repr(str(target.parent))}: no such directory")
        temp = Path(tempfile.mkdtemp(prefix=".labctl-cp.", dir=target.parent))
        into, final = temp, target
    try:
        pack = handle.argv(request.node, ["sh", "-c", _PACK, "sh", node_src])
        unpack = ["tar", "-xf", "-", "--no-same-owner", "-C", str(into)]
        code_pack, code_unpack, pack_errors, unpack_errors = _pipe(pack, unpack, timeout)
        if code_pack != 0:
            raise _fail(code_pack, request.node, pack_errors, f"copy from {request.node}")
        if code_unpack != 0:
            raise LabctlError(f"writing into {into} failed: {unpack_errors.strip()}",
                              hint="is there room on the host, and may labctl write there?")
        if temp is not None:
            unpacked = temp / name
            if target.exists() and not target.is_dir() and unpacked.is_dir():
                raise UsageError(f"{request.host_path} is a file; the node's {node_src} is a "
                                 "directory", hint="choose another DST")
            os.replace(unpacked, target)
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
    return str(final)
