"""Faults for a test's own code: `with rdma_fault("node2:eth1", "drop", opcodes=["ack"],
count=3) as fault:` puts a labctl fault (docs/faults.md) on the lab while the block runs and
takes it off after, whatever the block did; `fault.hits()` says how many packets it matched
and acted on, `fault.counter_changes()` how each node's RDMA (and TCP) counters moved since
it was put on.

    def test_survives_a_lost_read_response(rdma_lab, rdma_fault):
        with rdma_fault("node1:eth1", "drop", opcodes=["read-response"], nth=1) as fault:
            record = rdma_lab.run_pair(...)
        assert record.status == "passed" and fault.hits()[1] == 1
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from labctl.lab import counters
from labctl.lab.handle import LabHandle
from labctl.rdmafault.apply import Fault, add_fault, clear_faults, fault_counts
from labctl.rdmafault.fault_spec import build_spec

_NO_MATCH: dict[str, Any] = {"opcodes": [], "qp": None, "psn": None, "tcp": False,
                             "tcp_port": None, "nth": None, "every": None, "count": None,
                             "skip": None, "probability": None, "delay": None}


class InjectedFault:
    """A fault on the lab while its `with` block runs."""

    def __init__(self, handle: LabHandle, fault: Fault,
                 before: dict[str, counters.Counters | None]) -> None:
        self.handle, self.fault, self._before = handle, fault, before

    def hits(self) -> tuple[int, int] | None:
        """(matched, hit) packets so far; None when the node did not answer."""
        found = fault_counts(self.handle, [self.fault])[self.fault.id]
        return None if found is None else (found[0], found[1])

    def counter_changes(self) -> dict[str, counters.Counters | None]:
        """Each node's counter change since the fault was put on (None: not read)."""
        after = counters.read_all(self.handle, list(self._before))
        return {n: counters.delta(self._before[n], after[n]) for n in self._before}


@contextmanager
def injected_fault(handle: LabHandle, endpoint: str, action: str,
                   **match: Any) -> Iterator[InjectedFault]:
    """The fault `labctl fault add ENDPOINT ACTION` with `match` as its options (opcodes,
    qp, psn, tcp, tcp_port, nth, every, count, skip, probability, delay), taken off at the
    end. Bad input raises labctl's UsageError before anything is put on."""
    from labctl.topology.lookup import require_endpoint

    unknown = set(match) - set(_NO_MATCH)
    if unknown:
        raise TypeError(f"unknown fault options: {', '.join(sorted(unknown))}")
    spec = build_spec(action, **{**_NO_MATCH, **match})
    node, ifname = require_endpoint(handle.lab, endpoint)
    before = counters.read_all(handle, handle.node_names())
    fault = add_fault(handle, node, ifname, spec)
    try:
        yield InjectedFault(handle, fault, before)
    finally:
        clear_faults(handle, fault_id=fault.id)
