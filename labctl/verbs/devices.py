"""`ibv_devices` of rdma-core 56.1: the device list with node GUIDs (no pyverbs needed)."""

from __future__ import annotations

import os
import sys

from labctl.verbs.records import Snapshot


def render(snap: Snapshot) -> tuple[str, str, int]:
    """(stdout, stderr, exit status) of ibv_devices for this snapshot."""
    if snap.list_errno is not None:
        return "", f"Failed to get IB devices list: {os.strerror(snap.list_errno)}\n", 1
    lines = [
        f"    {'device':<16}\t   node GUID\n",
        f"    {'------':<16}\t----------------\n",
    ]
    lines += [f"    {d.name:<16}\t{d.node_guid:016x}\n" for d in snap.devices]
    return "".join(lines), "", 0


def as_json(snap: Snapshot) -> str:
    import json

    if snap.list_errno is not None:
        payload: object = {"error": os.strerror(snap.list_errno), "errno": snap.list_errno}
    else:
        payload = [{"device": d.name, "node_guid": f"{d.node_guid:016x}"} for d in snap.devices]
    return json.dumps(payload, indent=2) + "\n"


def main(argv: list[str], snap: Snapshot | None = None) -> int:
    """ibv_devices takes no options and ignores its arguments; --json is ours."""
    if snap is None:
        from labctl.verbs.devinfo import capture

        snap = capture(probe=False)
    out, err, rc = render(snap)
    if "--json" in argv[1:]:
        out = as_json(snap)
    sys.stdout.write(out)
    sys.stdout.flush()
    if err:
        sys.stderr.write(err)
    return rc
