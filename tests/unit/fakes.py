"""Stand-ins the unit tests share."""

from __future__ import annotations

import subprocess
import sys
import time

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
