"""Count what a lab leaves on the host: used before and after teardown."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

from pyroute2 import netns

from labctl.paths import state_root


def lab_qemus(name: str) -> list[str]:
    """qemu processes of lab `name`, exactly: their -pidfile lies in the lab's directory
    (a substring of -name would also match lab `name-x`)."""
    nodes = f"{state_root() / name}/nodes/"
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        for flag, value in itertools.pairwise(argv):
            if flag == "-pidfile" and value.startswith(nodes) and value.count("/") == (
                    nodes.count("/") + 1):
                found.append(f"{proc.name} {' '.join(argv[:3])}")
    return sorted(found)


def lab_leftovers(name: str) -> dict[str, list[str]]:
    """Everything of lab `name` still on the host (empty lists when it is gone)."""
    procs = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True,
                           text=True).stdout  # -ww: whole command lines, never cut
    labdir = state_root() / name
    return {
        "netns": [n for n in netns.listnetns() if n == f"labctl-{name}"],
        "qemu": lab_qemus(name),
        "ssh": [p.strip() for p in procs.splitlines() if "ssh" in p and f"{labdir}/" in p],
        "labdir": [str(labdir)] if labdir.exists() else [],
    }


def host_interfaces() -> set[str]:
    return {p.name for p in Path("/sys/class/net").iterdir()}
