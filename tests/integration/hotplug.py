"""Devices made and removed while a node's inspector helper runs: what labctl prints must
stay the bytes of a fresh C tool (issue 34, item 9).

libibverbs keeps its device list for a process's life and adds a later device at the
list's head; the helper (labctl/verbs/helper.py) therefore starts again when the node's
devices change. Shared by the rxe case (test_inspector.py) and the siw one (test_siw.py).
"""

from __future__ import annotations

import difflib
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from labctl.lab.handle import LabHandle

HELPER_SOCKET = "/run/labctl/verbs.sock"
# Asks the helper only (exit 99 if it would have fallen back to the direct path).
HELPER_ONLY = ("import sys; from labctl.verbs import helper; "
               "s = helper.call(sys.argv[1:]); sys.exit(99 if s is None else s)")
CASES = (("devices",), ("devinfo",), ("devinfo", "-l"))


def _diff(c_out: str, ours: str) -> str:
    return "".join(difflib.unified_diff(c_out.splitlines(True), ours.splitlines(True),
                                        "C tool", "labctl"))


def same_as_c(handle: LabHandle, node: str, argv: list[str], case: tuple[str, ...],
              why: str) -> None:
    c = handle.run(node, [f"ibv_{case[0]}", *case[1:]], timeout=120)
    ours = handle.run(node, argv, timeout=180)
    assert (ours.returncode, ours.stdout) == (c.returncode, c.stdout), (
        f"{' '.join(case)} {why} differs from the C tool on {node}:\n"
        f"{_diff(c.stdout, ours.stdout)}\nexit {ours.returncode} (C {c.returncode}); "
        f"stderr: {ours.stderr}")


def wait_helper_serves(handle: LabHandle, node: str, timeout: float = 240) -> None:
    """Until the helper answers a request itself (it restarts after a device change and
    imports pyverbs again at the node's pace)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe = handle.run(node, handle.node_python3("-S", "-c", HELPER_ONLY, "devices"),
                           timeout=60)
        if probe.returncode != 99:
            return
        time.sleep(1)
    log = handle.run(node, ["cat", "/run/labctl-verbs-helper.log"], timeout=30).stdout
    raise AssertionError(f"the inspector helper of {node} did not serve again in "
                         f"{timeout} s: {log}")


def check_hot_plug(handle: LabHandle, node: str, kind: str) -> None:
    """Make an extra `kind` device on a dummy netdev, then remove it; after each change,
    labctl's commands (right away: the direct path; then the restarted helper) must print
    the C tools' bytes."""
    from labctl.cli.inspect import node_argv

    netdev, device = "hy0", f"{kind}hy"

    def compare_all(why: str) -> None:
        for case in CASES:  # right after the change: the helper refuses, the client runs it
            same_as_c(handle, node, node_argv(*case), case, f"{why}, at once")
        wait_helper_serves(handle, node)
        for case in CASES:
            helper_only = handle.node_python3("-S", "-c", HELPER_ONLY, *case)
            same_as_c(handle, node, helper_only, case, f"{why}, from the restarted helper")

    wait_helper_serves(handle, node)
    add = handle.run(node, ["sh", "-ec", f"ip link add {netdev} type dummy; "
                            f"ip link set {netdev} up; "
                            f"rdma link add {device} type {kind} netdev {netdev}"],
                     timeout=60)
    try:
        assert add.returncode == 0, add.stderr
        compare_all(f"with {device} added")
        gone = handle.run(node, ["rdma", "link", "delete", device], timeout=60)
        assert gone.returncode == 0, gone.stderr
        compare_all(f"with {device} removed")
    finally:
        handle.run(node, ["sh", "-c", f"rdma link delete {device}; ip link delete {netdev}"],
                   timeout=60)
