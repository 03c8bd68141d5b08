"""The one reply format of everything labctl runs outside its process (stdlib only).

A node's status, its counters and links, a fault's gate, the Docker host's network helper
and port check all answer the host with one line on stdout, the last one, ended by a
newline:

    {"labctl_reply": 1, "ok": true, "data": PAYLOAD}
    {"labctl_reply": 1, "ok": false, "error": "what went wrong"}

`labctl_reply` is the format's version; a reader of another version refuses the line. What
comes before that line (a tool's chatter) is not read. The host reads it with one reader,
`labctl.node.replies.read_reply`, bounded and checked: the sender runs the user's code as
root, so its reply is data. Each payload is then checked by its own reader.

Writers: Python code that runs in a node imports `line`/`error_line`; files sent as text
to `python3 -` (they can import nothing) carry a copy of `line` and `error_line`, which a
unit test holds to these; shell answers are made by `shell_answer` below, and
`status.sh` spells the envelope in its awk.
"""

from __future__ import annotations

import json

VERSION = 1
KEY = "labctl_reply"


def line(data: object) -> str:
    """The reply line that answers `data` (JSON-serialisable)."""
    return json.dumps({KEY: VERSION, "ok": True, "data": data}, separators=(",", ":"))


def error_line(message: str) -> str:
    """The reply line that says the work failed, and why."""
    return json.dumps({KEY: VERSION, "ok": False, "error": message}, separators=(",", ":"))


def shell_answer(fields: dict[str, str]) -> str:
    """A POSIX sh script that runs each command of `fields` (each prints one JSON value)
    and answers {"NAME": VALUE, ...} as one reply line; it exits 1, printing no reply,
    when a command fails. The commands are labctl's own, never a user's words."""
    steps = [f"v{i}=$({command}) || exit 1" for i, command in enumerate(fields.values())]
    args = []
    for i, name in enumerate(fields):
        opening = f'{{"{KEY}": {VERSION}, "ok": true, "data": {{' if i == 0 else ", "
        args += [_sh_single(f'{opening}"{name}": '), f'"$v{i}"']
    args.append(_sh_single("}}"))
    # printf repeats '%s' for each argument; tr joins a value that a tool printed over
    # several lines (a newline between JSON tokens is only white space).
    return "\n".join([*steps, f"printf '%s' {' '.join(args)} | tr -d '\\n'; echo"])


def _sh_single(text: str) -> str:
    """`text` quoted for sh (it holds no single quote: labctl's own fixed words)."""
    return "'" + text + "'"
