"""The error a bad topology file gives: file, line, field, what is wrong, what to do; one
problem, or every problem of the stage that found them (shown up to a cap)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from labctl.errors import UsageError

DEFAULT_HINT = "see docs/topology.md for the file format; `labctl schema` prints its JSON Schema"

# At most this many problems are listed (then "... and N more"): a hostile file of 20,000
# bad keys must not print megabytes. Their hints follow, a hint shared by several once.
MAX_PROBLEMS_SHOWN = 20


@dataclass(frozen=True)
class LocatedProblem:
    """One problem of a topology file as reported: `line` 1-based or None, `field` a
    dotted key path or "" for the file as a whole."""

    line: int | None
    field: str
    message: str
    hint: str

    def text(self, file: str) -> str:
        """`file:line: field: message`, the line of an error."""
        where = file if self.line is None else f"{file}:{self.line}"
        return f"{where}: {self.field}: {self.message}" if self.field else \
            f"{where}: {self.message}"


class TopologyError(UsageError):
    """A topology file that cannot be used; reads `file:line: field: reason`.

    `line` is 1-based, or None when unknown (a Topology built in code, an unreadable
    file). `field` is the dotted path of the key, e.g. `nodes.node3.rdma` or
    `links[0].endpoints[1]` (list indexes count from 0), or "" for the file as a whole.

    An error of several problems (`several`) keeps the first one in `line`, `field` and
    `reason`, lists those shown in `problems` (file order) and counts the rest in `more`.
    """

    def __init__(
        self,
        file: str,
        line: int | None,
        field: str,
        message: str,
        hint: str | None = DEFAULT_HINT,
    ) -> None:
        first = LocatedProblem(line, field, message, hint or "")
        super().__init__(first.text(file), hint)
        self.file = file
        self.line = line
        self.field = field
        self.reason = message
        self.problems: tuple[LocatedProblem, ...] = (first,)
        self.more = 0

    @classmethod
    def several(cls, file: str, problems: Sequence[LocatedProblem],
                more: int = 0) -> TopologyError:
        """One error for `problems` (at least one, in the order to report them) and `more`
        not given. One problem reads exactly as `TopologyError(...)`; more read as a count,
        then one `file:line: field: message` line each (MAX_PROBLEMS_SHOWN at most), and
        one `hint:` line per distinct hint."""
        first = problems[0]
        error = cls(file, first.line, first.field, first.message, first.hint or None)
        if len(problems) == 1 and not more:
            return error
        shown = tuple(problems[:MAX_PROBLEMS_SHOWN])
        more += len(problems) - len(shown)
        lines = [f"{file}: {len(shown) + more} problems"]
        lines += [f"  {p.text(file)}" for p in shown]
        if more:
            lines.append(f"  ... and {more} more")
        hints = list(dict.fromkeys(p.hint for p in shown if p.hint))
        error.message = "\n".join(lines)
        error.args = (error.message,)
        # Every command prints an error's hint as `hint: HINT`: each further hint gets its
        # own `hint:` line, so that none reads as part of the one before.
        error.hint = "\nhint: ".join(hints) or None
        error.problems = shown
        error.more = more
        return error
