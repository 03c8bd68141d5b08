"""Ready probes the workload examples share: shell text run as root in the server node.

Every value in them is an int made here (options are checked before a run, spec.py)."""

from __future__ import annotations

import shlex


def ports_listening_probe(*ports: int) -> str:
    """Exit 0 once something listens on every one of the TCP `ports` in the node."""
    return " && ".join(f"ss -Hltn {shlex.quote(f'sport = :{int(port)}')} | grep -q ."
                       for port in ports)
