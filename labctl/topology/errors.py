"""The one error a bad topology file gives: file, line, field, what is wrong, what to do."""

from __future__ import annotations

from labctl.errors import UsageError

DEFAULT_HINT = "see docs/topology.md for the file format; `labctl schema` prints its JSON Schema"


class TopologyError(UsageError):
    """A topology file that cannot be used; reads `file:line: field: reason`.

    `line` is 1-based, or None when unknown (a Topology built in code, an unreadable
    file). `field` is the dotted path of the key, e.g. `nodes.node3.rdma` or
    `links[0].endpoints[1]` (list indexes count from 0), or "" for the file as a whole.
    """

    def __init__(
        self,
        file: str,
        line: int | None,
        field: str,
        message: str,
        hint: str | None = DEFAULT_HINT,
    ) -> None:
        where = file if line is None else f"{file}:{line}"
        text = f"{where}: {field}: {message}" if field else f"{where}: {message}"
        super().__init__(text, hint)
        self.file = file
        self.line = line
        self.field = field
        self.reason = message
