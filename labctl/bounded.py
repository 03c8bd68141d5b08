"""Reading what labctl does not control, bounded in size, time and nesting.

A node (which runs the user's code as root), a lab's state directory and a cache file are
data, never authority (docs/reliability.md, "Trust boundaries"): every byte labctl takes
from them goes through here, so that a 400 MB console log, a FIFO in place of state.json,
/dev/zero, 100k-deep JSON or a reply that never ends costs a bounded amount and ends in a
`BoundedError` (a ValueError) that the caller turns into a message, never a traceback.

Numbers are read by one parser (`parse_int`, `parse_float`, and `loads` uses them): at
most MAX_NUMBER_CHARS characters, finite, in range, else a `NumberError`. Text from outside
is made safe to print by `printable` (no terminal escape sequences reach the terminal).

Stdlib only on purpose: the helpers below are small, and the node-side code may import them.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

from labctl.errors import LabctlError

# What a state or record file may cost: a lab's state.json is a few KiB, a node's status
# reply less than that.
STATE_FILE_BYTES = 4 << 20
NODE_REPLY_BYTES = 8 << 20
MAX_JSON_DEPTH = 64  # state and replies are a handful of levels deep


class BoundedError(ValueError):
    """What was read is not acceptable: too large, too deep, not a regular file..."""


class NumberError(BoundedError, LabctlError):
    """A number from outside labctl that is not one, is too long, not finite or out of
    range. A BoundedError (ValueError) for the callers that turn those into a node's or a
    file's reason, and a LabctlError with a hint for those that let it reach the user."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        LabctlError.__init__(self, message, hint or (
            "the text came from a node, a lab's state or the image cache, not from labctl: "
            "look at what wrote it, or remove the file and make it again"))


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "named pipe (FIFO)"),
             (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
             (stat.S_ISSOCK, "socket"), (stat.S_ISLNK, "symbolic link"))
    return next((name for test, name in kinds if test(mode)), "special file")


def _kind_at(path: Path) -> str:
    try:
        return _file_kind(os.lstat(path).st_mode)
    except OSError:
        return "special file"


def _cut(text: str, limit: int = 80) -> str:
    """A path for a message: a 5,000-character name is not echoed whole."""
    return text if len(text) <= limit else text[:limit] + "…"


def _open_regular(path: Path, follow_symlinks: bool) -> tuple[int, os.stat_result]:
    """An fd on `path`, checked to be a regular file. O_NONBLOCK: a FIFO never blocks
    open(); O_NOFOLLOW (unless asked to follow): a symlink is refused, not followed."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:  # the last part is a symlink
            raise BoundedError(f"{path} is a symbolic link (not followed)") from None
        if exc.errno == errno.ENXIO:  # a socket: open() cannot open one
            raise BoundedError(f"{path} is a {_kind_at(path)}, not a regular file") from None
        if exc.errno == errno.ENAMETOOLONG:
            raise BoundedError(f"{_cut(str(path))} is too long a path ({len(str(path))} "
                               "characters, or a name of more than 255 bytes)") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise BoundedError(f"{path} is a {_file_kind(st.st_mode)}, not a regular file")
    return fd, st


def read_regular(path: Path, limit: int = STATE_FILE_BYTES, *,
                 follow_symlinks: bool = False) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them, else BoundedError.

    FileNotFoundError and other OSErrors pass through (a missing file is often normal)."""
    fd, st = _open_regular(path, follow_symlinks)
    try:
        if st.st_size > limit:
            raise BoundedError(f"{path} is too large ({st.st_size} bytes; at most {limit})")
        data = read_at_most(fd, limit)
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew while being read
        raise BoundedError(f"{path} is too large (more than {limit} bytes)")
    return data


def read_at_most(fd: int, limit: int) -> bytes:
    """Read `fd` to its end, but never more than `limit` + 1 bytes: a result longer than
    `limit` means the file is larger (or grew while it was read)."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = os.read(fd, limit + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_text(path: Path, limit: int = STATE_FILE_BYTES, *,
              follow_symlinks: bool = False) -> str:
    """read_regular() as UTF-8 text; BoundedError if it is not UTF-8."""
    try:
        return read_regular(path, limit, follow_symlinks=follow_symlinks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BoundedError(f"{path} is not UTF-8 text (byte {exc.start})") from None


def read_tail(path: Path, limit: int = 64 << 10) -> str:
    """The last `limit` bytes of a regular file as text (bad bytes replaced): a guest's
    console log can be any size and is written by the guest."""
    fd, st = _open_regular(path, follow_symlinks=False)
    try:
        start = max(0, st.st_size - limit)
        os.lseek(fd, start, os.SEEK_SET)
        data = os.read(fd, limit)
    finally:
        os.close(fd)
    if start:  # drop the partial first line
        data = data.partition(b"\n")[2]
    return data.decode("utf-8", errors="replace")


def _refuse_constant(name: str) -> Any:
    raise BoundedError(f"{name} is not JSON")


def loads(text: str | bytes, *, limit: int = STATE_FILE_BYTES,
          max_depth: int = MAX_JSON_DEPTH) -> Any:
    """json.loads() that refuses more than `limit` bytes, nesting deeper than `max_depth`,
    NaN and Infinity (not JSON; `status --json` must stay valid JSON), and numbers that
    parse_int/parse_float refuse (5,000 digits, 1e999), with BoundedError."""
    if len(text) > limit:
        raise BoundedError(f"{len(text)} bytes of JSON (at most {limit})")
    _check_depth(text, max_depth)
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_int=_json_int,
                           parse_float=_json_float)
    except RecursionError:
        raise BoundedError(f"JSON nested deeper than {max_depth} levels") from None
    except json.JSONDecodeError as exc:
        raise BoundedError(f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
                           ) from None
    except UnicodeDecodeError as exc:
        raise BoundedError(f"not UTF-8 (byte {exc.start})") from None
    return value


def _check_depth(text: str | bytes, max_depth: int) -> None:
    """Refuse nesting deeper than `max_depth` before parsing: json's C parser recurses
    once per level (100k levels is a RecursionError, or worse, a crash)."""
    data = text.encode() if isinstance(text, str) else text
    if data.count(b"[") + data.count(b"{") <= max_depth:
        return  # cannot be too deep: the common case costs two counts
    depth = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub(b"", data)):
        depth += 1 if bracket in b"[{" else -1
        if depth > max_depth:
            raise BoundedError(f"JSON nested deeper than {max_depth} levels")


_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")


def load_object(text: str | bytes, *, limit: int = STATE_FILE_BYTES,
                max_depth: int = MAX_JSON_DEPTH) -> dict[str, Any]:
    """loads() that must give a JSON object."""
    value = loads(text, limit=limit, max_depth=max_depth)
    if not isinstance(value, dict):
        raise BoundedError(f"a JSON {_json_kind(value)}, not an object")
    return value


def json_kind(value: object) -> str:
    """What a parsed JSON value is, for a message: "a list", "null"..."""
    kinds = ((bool, "a boolean"), (str, "a string"), (int, "a number"), (float, "a number"),
             (list, "a list"), (dict, "an object"), (type(None), "null"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "a value")


def _json_kind(value: Any) -> str:
    kinds = ((list, "list"), (str, "string"), (bool, "boolean"), (int, "number"),
             (float, "number"), (type(None), "null"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "value")


def finite(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))


# --------------------------------------------------------------------------- numbers
# Python refuses int() of more than 4,300 digits with a ValueError that names no input; a
# float() of 400 digits is inf. Every number labctl takes from outside (a node's reply, a
# program's output, a file of a lab or the cache) is read here instead: a figure of a
# program, a size or a time stamp never needs more than MAX_NUMBER_CHARS characters.
MAX_NUMBER_CHARS = 64
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _number_text(text: str | bytes, what: str) -> str:
    if isinstance(text, bytes):
        text = text.decode("ascii", errors="replace")
    text = text.strip()
    if len(text) > MAX_NUMBER_CHARS:
        raise NumberError(f"{what} is not a number labctl accepts ({len(text)} characters; "
                          f"at most {MAX_NUMBER_CHARS})")
    return text


def _in_range(value: float, what: str, low: float | None, high: float | None) -> None:
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"{'' if low is None else low}..{'' if high is None else high}"
        raise NumberError(f"{what} is out of range ({value}; expected {bounds})")


def parse_int(text: str | bytes, what: str = "a number", *, low: int | None = None,
              high: int | None = None, base: int = 10) -> int:
    """int(text) for text from outside: at most MAX_NUMBER_CHARS characters, digits only
    (base 10) or what int(text, base) takes, in [low, high]; else NumberError."""
    text = _number_text(text, what)
    if base == 10 and not _INT.fullmatch(text):
        raise NumberError(f"{what} is not a whole number ({printable(repr(text))})")
    try:
        value = int(text, base)
    except ValueError:
        raise NumberError(f"{what} is not a whole number ({printable(repr(text))})") from None
    _in_range(value, what, low, high)
    return value


def parse_float(text: str | bytes, what: str = "a number", *, low: float | None = None,
                high: float | None = None) -> float:
    """float(text) for text from outside: decimal notation only (no "nan", "inf" or
    "1_0"), at most MAX_NUMBER_CHARS characters, finite, in [low, high]; else
    NumberError."""
    text = _number_text(text, what)
    if not _FLOAT.fullmatch(text):
        raise NumberError(f"{what} is not a number ({printable(repr(text))})")
    value = float(text)
    if not finite(value):
        raise NumberError(f"{what} is not a finite number ({printable(text)})")
    _in_range(value, what, low, high)
    return value


def finite_number(value: object, what: str = "a number", *, low: float | None = None,
                  high: float | None = None) -> float:
    """A number already parsed (from JSON): an int or a float, not a bool, finite, in
    range; else NumberError. What `made: 1e999` in a file or a node's reply comes to."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NumberError(f"{what} is not a number ({type(value).__name__})")
    number = float(value) if isinstance(value, float) else value
    if isinstance(number, float) and not finite(number):
        raise NumberError(f"{what} is not a finite number")
    if isinstance(number, int) and abs(number) >= 1 << 63:
        raise NumberError(f"{what} is out of range (more than 63 bits)")
    _in_range(number, what, low, high)
    return number


def _json_int(text: str) -> int:
    return parse_int(text, "a number in the JSON")


def _json_float(text: str) -> float:
    return parse_float(text, "a number in the JSON")


# --------------------------------------------------------------------------- printing
# A node's words, a file's name or a program's output may hold terminal escape sequences
# (ESC: CSI, OSC such as a window title or a hyperlink; 8-bit CSI 0x9b) and other control
# characters: printed raw they rewrite the terminal. `printable` shows them as Python
# escapes instead; newline and tab stay as they are.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e"
                       "\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control character but newline and tab (C0, DEL, C1, and the
    bidirectional overrides) written as a visible escape such as \\x1b."""
    return _CONTROLS.sub(_escaped, text)


# --------------------------------------------------------------------------- both ends
# Added for the node-reply work (issue 35): a guest's console log is read by its start
# (the boot's ready or fail line) and its end (the last stage), never whole.


def read_ends(path: Path, head: int, tail: int) -> str:
    """The first `head` and the last `tail` bytes of a regular file as text (bad bytes
    replaced); the whole file when it is no larger than both together."""
    fd, st = _open_regular(path, follow_symlinks=False)
    try:
        first = os.read(fd, min(st.st_size, head + tail))
        if st.st_size <= head + tail:
            return first.decode("utf-8", errors="replace")
        os.lseek(fd, st.st_size - tail, os.SEEK_SET)
        last = os.read(fd, tail)
    finally:
        os.close(fd)
    first = first[:head].rpartition(b"\n")[0] + b"\n"  # whole lines only on both sides
    last = last.partition(b"\n")[2]
    return (first + last).decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- following
# `labctl logs -f`: what a guest appends to its console log, read in bounded steps.
FileMark = tuple[int, int]  # (inode, offset): where the last read of a file ended


def read_since(path: Path, mark: FileMark | None, limit: int = 64 << 10) -> tuple[bytes, FileMark]:
    """At most `limit` bytes a regular file gained since `mark`, and the mark after them;
    `mark` None: nothing, the mark of its end now. A file replaced (another inode: a node's
    restart starts a new console log) or cut shorter is read again from its start."""
    fd, st = _open_regular(path, follow_symlinks=False)
    try:
        if mark is None:
            return b"", (st.st_ino, st.st_size)
        inode, offset = mark
        if inode != st.st_ino or st.st_size < offset:
            offset = 0
        os.lseek(fd, offset, os.SEEK_SET)
        data = os.read(fd, min(limit, max(0, st.st_size - offset)))
    finally:
        os.close(fd)
    return data, (st.st_ino, offset + len(data))
