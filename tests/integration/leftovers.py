"""Count what a lab leaves on the host: used before and after teardown."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pyroute2 import netns

from labctl.paths import state_root


def lab_leftovers(name: str) -> dict[str, list[str]]:
    """Everything of lab `name` still on the host (empty lists when it is gone)."""
    procs = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    labdir = state_root() / name
    return {
        "netns": [n for n in netns.listnetns() if n == f"labctl-{name}"],
        "qemu": [p.strip() for p in procs.splitlines() if f"guest=labctl-{name}-" in p],
        "ssh": [p.strip() for p in procs.splitlines() if "ssh" in p and str(labdir) in p],
        "labdir": [str(labdir)] if labdir.exists() else [],
    }


def host_interfaces() -> set[str]:
    return {p.name for p in Path("/sys/class/net").iterdir()}
