"""GNU getopt_long(3) and strtol(3), as the rdma-core examples see them.

Python's `getopt.gnu_getopt` parses the whole argument list before the program sees any
option; the C tools act on each option as it comes (`ibv_devinfo -l -x` lists and exits
0, `-x -l` fails), so we need an incremental parser. This one follows glibc: argument
permutation (unless POSIXLY_CORRECT is set), `--` ends the options, clustered short
options, `-dVALUE` and `-d VALUE`, long options by unique prefix, `--opt=value`, and
glibc's diagnostics on stderr.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # no `typing`/`dataclasses` at run time: node startup cost
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import TextIO

ERROR = "?"


class LongOpt:
    """struct option: name, has_arg, and the option it maps to (a letter, or our own key)."""

    __slots__ = ("has_arg", "name", "val")

    def __init__(self, name: str, has_arg: bool, val: str) -> None:
        self.name = name
        self.has_arg = has_arg
        self.val = val


def getopt_long(
    argv: list[str],
    optstring: str,
    longopts: tuple[LongOpt, ...],
    err: TextIO,
    prog: str,
) -> Iterator[tuple[str, str | None]]:
    """Yield (option, optarg) in order; option is ERROR after printing a diagnostic."""
    posix = optstring.startswith("+") or "POSIXLY_CORRECT" in os.environ
    optstring = optstring.lstrip("+-")
    i = 1
    n = len(argv)
    while i < n:
        arg = argv[i]
        if arg == "--":
            return
        if not arg.startswith("-") or arg == "-":
            if posix:
                return
            i += 1
            continue
        if arg.startswith("--"):
            i += 1
            body = arg[2:]
            name, eq, value = body.partition("=")
            match = _match_long(name, longopts)
            if match is None:
                err.write(f"{prog}: unrecognized option '--{body}'\n")
                yield ERROR, None
                continue
            if isinstance(match, list):
                names = "".join(f" '--{m.name}'" for m in match)
                err.write(f"{prog}: option '--{name}' is ambiguous; possibilities:{names}\n")
                yield ERROR, None
                continue
            if match.has_arg:
                if eq:
                    yield match.val, value
                elif i < n:
                    i += 1
                    yield match.val, argv[i - 1]
                else:
                    err.write(f"{prog}: option '--{match.name}' requires an argument\n")
                    yield ERROR, None
            elif eq:
                err.write(f"{prog}: option '--{match.name}' doesn't allow an argument\n")
                yield ERROR, None
            else:
                yield match.val, None
            continue
        # a cluster of short options
        i += 1
        pos = 1
        while pos < len(arg):
            ch = arg[pos]
            pos += 1
            k = optstring.find(ch) if ch != ":" else -1
            if k < 0:
                err.write(f"{prog}: invalid option -- '{ch}'\n")
                yield ERROR, None
                continue
            if optstring[k + 1 : k + 2] == ":":
                if pos < len(arg):
                    yield ch, arg[pos:]
                elif i < n:
                    i += 1
                    yield ch, argv[i - 1]
                else:
                    err.write(f"{prog}: option requires an argument -- '{ch}'\n")
                    yield ERROR, None
                break
            yield ch, None


def _match_long(name: str, longopts: tuple[LongOpt, ...]) -> LongOpt | list[LongOpt] | None:
    for opt in longopts:
        if opt.name == name:
            return opt
    found = [opt for opt in longopts if opt.name.startswith(name)]
    if not found:
        return None
    first = found[0]
    if all(o.has_arg == first.has_arg and o.val == first.val for o in found[1:]):
        return first
    return found


_LONG_MAX = (1 << 63) - 1
_LONG_MIN = -(1 << 63)
_SPACE = " \t\n\v\f\r"


def strtol(text: str, base: int = 0) -> int:
    """strtol(text, NULL, base) for a 64-bit long: prefix parse, clamp on overflow."""
    s = text.lstrip(_SPACE)
    neg = False
    if s[:1] in ("+", "-"):
        neg = s[0] == "-"
        s = s[1:]
    if base in (0, 16) and s[:2].lower() == "0x" and s[2:3] and _digit(s[2], 16) is not None:
        s = s[2:]
        base = 16
    elif base == 0:
        base = 8 if s.startswith("0") else 10
    value = 0
    seen = False
    for ch in s:
        d = _digit(ch, base)
        if d is None:
            break
        value = value * base + d
        seen = True
    if not seen:
        return 0
    if neg:
        value = -value
    return max(_LONG_MIN, min(_LONG_MAX, value))


def _digit(ch: str, base: int) -> int | None:
    if "0" <= ch <= "9":
        d = ord(ch) - 48
    elif "a" <= ch.lower() <= "z":
        d = ord(ch.lower()) - 87
    else:
        return None
    return d if d < base else None


def c_int(value: int) -> int:
    """Conversion of a C long to int (two's complement wrap to 32 bits)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value
