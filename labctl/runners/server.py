"""The server side of a run: started in its node, its output read as it comes, and stopped
there for real when the run is over.

Killing our ssh does not stop a program in a node: the session has no tty, and the node's
ssh master keeps the channel (and our output pipe) open until the program ends at its
in-node bound. A server left that way keeps its port (the next run fails to listen) and,
when it busy-polls a CQ, the node's only vCPU (the next run crawls). So the server's first
line names the process group it runs in, and `stop` kills that group.
"""

from __future__ import annotations

import subprocess
import threading

from labctl import bounded
from labctl.lab.handle import LabHandle

GROUP_LINE = "labctl-run-pgid "
STOP_SECONDS = 3.0  # TERM, then KILL: a program in a node gets this long to exit


def with_group_line(argv: list[str]) -> list[str]:
    """`argv` in a process group of its own (setsid; -w passes the exit status on), behind
    a first output line naming that group: `timeout` and the program stay in it."""
    return ["setsid", "-w", "sh", "-c", f'echo "{GROUP_LINE}$$"; exec "$@"', "sh", *argv]


def split_group_line(output: str) -> tuple[int | None, str]:
    """The process group named by the first line, and the output without that line."""
    first, newline, rest = output.partition("\n")
    number = first[len(GROUP_LINE):]
    if newline and first.startswith(GROUP_LINE) and number.isdigit() and len(number) <= 10:
        return bounded.parse_int(number, "a process group"), rest
    return None, output


class ServerProcess:
    """One server program running in `node` through the lab's management channel."""

    def __init__(self, handle: LabHandle, node: str, argv: list[str]) -> None:
        self.handle = handle
        self.node = node
        self.process = handle.popen(node, with_group_line(argv), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT)
        self._lines: list[str] = []
        # A thread, not communicate(): a communicate() that times out keeps what it read.
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        """Keep the first NODE_REPLY_BYTES characters the server prints, read the rest away
        (the node prints what it likes: a line of 300 MB must not be held whole)."""
        assert self.process.stdout is not None
        kept = 0
        while line := self.process.stdout.readline(65536):
            if kept < bounded.NODE_REPLY_BYTES:
                self._lines.append(line[: bounded.NODE_REPLY_BYTES - kept])
                kept += len(line)
                if kept >= bounded.NODE_REPLY_BYTES:
                    self._lines.append("\n(output cut here)\n")

    def running(self) -> bool:
        return self.process.poll() is None

    def wait(self, seconds: float) -> bool:
        """True when the server ended by itself within `seconds`."""
        try:
            self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        self._reader.join(timeout=5)
        return True

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def output(self) -> str:
        return split_group_line("".join(self._lines))[1]

    def stop(self, *, in_node: bool) -> None:
        """End the program in the node (its whole group; `in_node` False when the node is
        gone), then our ssh. The output read so far is kept."""
        if not self.running():
            return
        group, _ = split_group_line("".join(self._lines))
        if in_node and group is not None and group > 1:  # never "-1": every process
            # procps' kill: dash's builtin takes neither `--` nor a negative pid.
            script = ('/bin/kill -TERM -- "-$1" 2>/dev/null || exit 0; i=0; '
                      'while /bin/kill -0 -- "-$1" 2>/dev/null && '
                      f'[ $i -lt {STOP_SECONDS * 10:.0f} ]; do sleep 0.1; i=$((i+1)); done; '
                      '/bin/kill -KILL -- "-$1" 2>/dev/null; exit 0')
            self.handle.run(self.node, ["sh", "-c", script, "sh", str(group)], timeout=30)
        if not self.wait(5):  # the channel closes once the program is gone
            self.process.kill()
            self.process.wait()
            self._reader.join(timeout=2)
