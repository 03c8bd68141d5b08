"""What a node looked like when a run failed: connection manager and transport counters,
the RDMA resources still open, the data link's state. A red run (in CI above all) then
explains itself: a client stuck in connection setup shows as REQs sent again and again
(cm_tx_retries) with no REP received, a lost data path as rxe's retry counters.
"""

from __future__ import annotations

import shlex

from labctl.lab.handle import LabHandle

DIAGNOSE_SECONDS = 20.0
# `rdma statistic show link DEV/1` prints "link DEV/1" then name/value pairs (one per line
# or all on one, by iproute2 version): print the non-zero ones as "rxe NAME VALUE".
RXE_COUNTERS_FILTER = ("tr -s ' ' '\\n' | awk 'NR > 2 && NF { if (name) { if ($1 != 0) "
                       "print \"rxe \" name \" \" $1; name = \"\" } else name = $1 }'")
# `grep -H . DIR/*` over the CM counter directories prints "DIR/NAME:VALUE".
CM_COUNTERS_FILTER = "awk -F: '$2 != 0 { print \"cm \" $1 \" \" $2 }'"


def snapshot_script(device: str, interface: str) -> str:
    """Shell text printing the node's RDMA state; every value is quoted here."""
    dev, iface = shlex.quote(device), shlex.quote(interface)
    port = shlex.quote(f"/sys/class/infiniband/{device}/ports/1")
    link = shlex.quote(f"{device}/1")
    # Counters are totals since the device came up; zero ones are left out (they are most).
    # Few processes: under TCG each fork+exec in the node costs 0.1-1 s.
    return "; ".join([
        f"printf 'port %s/1: ' {dev}; cat {port}/state {port}/phys_state 2>/dev/null | "
        "paste -sd ' '",
        f"cd {port} && grep -H . cm_tx_msgs/* cm_rx_msgs/* cm_tx_retries/* "
        f"cm_rx_duplicates/* 2>/dev/null | {CM_COUNTERS_FILTER}",
        f"rdma statistic show link {link} 2>/dev/null | {RXE_COUNTERS_FILTER}",
        "echo 'cm_id:'; rdma res show cm_id 2>/dev/null",
        "echo 'qp:'; rdma res show qp 2>/dev/null",
        f"ip -br link show dev {iface} 2>/dev/null; tc qdisc show dev {iface} 2>/dev/null",
    ])


def snapshot(handle: LabHandle, node: str, device: str, interface: str) -> str:
    """The node's RDMA state as text; a failure to read it is said, never raised (the run
    has failed already; this is a courtesy to whoever reads why)."""
    try:
        result = handle.run(node, ["sh", "-c", snapshot_script(device, interface)],
                            timeout=DIAGNOSE_SECONDS)
    except Exception as exc:  # the run's own failure must stay the news
        return f"(could not read the node's state: {exc})"
    text = (result.stdout + result.stderr).rstrip()
    if result.returncode != 0:
        text += f"\n(reading the node's state exited with {result.returncode})"
    return text
