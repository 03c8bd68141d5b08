"""Stand-ins the unit tests share."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from labctl.vm.machine import QemuMachine


def fake_qemu(machine: QemuMachine, procs: list[subprocess.Popen[bytes]]) -> int:
    """A process whose argv carries qemu's -name and -pidfile as a node's qemu does, with
    its pid in the machine's pidfile; appended to `procs` (the caller ends it)."""
    machine.dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "-name",
                             f"guest={machine.guest}", "-pidfile", str(machine.pidfile)],
                            start_new_session=True)
    procs.append(proc)
    for _ in range(300):
        if machine.owns(proc.pid):
            break
        time.sleep(0.01)
    machine.pidfile.write_text(f"{proc.pid}\n")
    return proc.pid


@contextlib.contextmanager
def within(seconds: int) -> Iterator[None]:
    """Fail (not hang) if the block takes longer: opening or reading a FIFO would wait
    forever."""
    def expire(_sig: int, _frame: Any) -> None:
        raise AssertionError(f"still running after {seconds} s (a FIFO opened or read?)")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
