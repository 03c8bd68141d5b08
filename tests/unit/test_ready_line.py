"""A node's ready line, as the guest writes it: piece by piece, and possibly hostile."""

from __future__ import annotations

import pytest

from labctl.node.ready import ready_facts, ready_line, runtime_from_boot_log
from labctl.store.state import NodeStatus

LINE = "labctl: ready dev=rxe0 gid=1 mtu=1024 state=ACTIVE [t=6.1]\n"


def test_a_ready_line_counts_once_it_is_whole() -> None:
    booting = "labctl: stage sshd\n"
    for cut in range(len(LINE)):  # every moment of the guest's write
        partial = booting + LINE[:cut]
        assert ready_line(partial) is None, partial
        assert runtime_from_boot_log("node1", partial, {}).state == NodeStatus.BOOTING
    whole = booting + LINE
    assert ready_line(whole) == LINE.rstrip("\n")
    assert runtime_from_boot_log("node1", whole, {}).state == NodeStatus.RUNNING
    assert ready_facts(whole) == {"gid_index": 1, "active_mtu": "1024", "port_state": "ACTIVE"}


@pytest.mark.parametrize("line", [
    "labctl: ready dev=rxe0 gid= mtu= state=\n",
    "labctl: ready gid=x1 mtu=-5 state=AC;TIVE\n",
    "labctl: ready gid=99999999999999999999 mtu=1e400 state=" + "A" * 5000 + "\n",
    "labctl: ready gid=\u0661 mtu=\u0661\u0660\u0662\u0664\n",  # int() takes these digits
])
def test_values_not_of_their_kind_are_left_out(line: str) -> None:
    assert ready_facts(line) == {}
