"""`--jobs N`: runs between pairs in parallel where they share no node, at most N at once,
results in the pairs' order. The pairs are planned from real topologies (resolve_pairs);
the work is a function that records which runs overlap."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from labctl.runners.pairs import resolve_pairs
from labctl.runners.schedule import pair_group, run_pairs
from labctl.topology.load import load_lab

ROOT = Path(__file__).resolve().parents[2]
WAIT = 30.0  # generous: a condition that is never met fails the test, it never hangs it


class Recorder:
    """Work that notes the nodes busy at its start; fails if a node is busy twice."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.busy: set[str] = set()
        self.running = 0
        self.most = 0
        self.clash: list[tuple[str, str]] = []

    def __call__(self, index: int, server: str, client: str) -> tuple[int, str, str]:
        with self.lock:
            if {server, client} & self.busy:
                self.clash.append((server, client))
            self.busy |= {server, client}
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            return index, server, client
        finally:
            with self.lock:
                self.busy -= {server, client}
                self.running -= 1


def test_four_node_switch_runs_disjoint_pairs_together() -> None:
    pairs = resolve_pairs(load_lab(ROOT / "topologies" / "four-node.yaml"), "all")
    assert len(pairs) == 6
    # node1:node2 and node3:node4 share no node: with --jobs 2 they must run at once (each
    # waits for the other at the barrier; run one after the other, both would time out).
    barrier = threading.Barrier(2, timeout=WAIT)
    together = {("node1", "node2"), ("node3", "node4")}
    record = Recorder()

    def work(index: int, server: str, client: str) -> tuple[int, str, str]:
        if (server, client) in together:
            barrier.wait()
        return record(index, server, client)

    order = [("node1", "node2"), ("node3", "node4"), *[p for p in pairs if p not in together]]
    results = run_pairs(order, 2, work)
    assert results == [(i, s, c) for i, (s, c) in enumerate(order)]  # the pairs' order
    assert not record.clash


def test_pairs_sharing_a_node_never_overlap() -> None:
    # three-node switch: every two pairs share a node, so --jobs 3 still runs one at a time
    pairs = resolve_pairs(load_lab(ROOT / "topologies" / "three-node-switch.yaml"), "all")
    record = Recorder()
    assert [r[1:] for r in run_pairs(pairs, 3, record)] == pairs
    assert record.most == 1 and not record.clash


def test_jobs_bound_the_runs_at_once() -> None:
    pairs = [(f"a{i}", f"b{i}") for i in range(6)]  # all disjoint
    started = threading.Semaphore(0)
    release = threading.Event()
    lock = threading.Lock()
    at_once = [0, 0]  # now, most

    def work(index: int, server: str, client: str) -> int:
        with lock:
            at_once[0] += 1
            at_once[1] = max(at_once[1], at_once[0])
        started.release()
        assert release.wait(WAIT)
        with lock:
            at_once[0] -= 1
        return index

    result: list[int] = []
    runner = threading.Thread(target=lambda: result.extend(run_pairs(pairs, 3, work)))
    runner.start()
    for _ in range(3):
        assert started.acquire(timeout=WAIT)
    assert not started.acquire(timeout=0.2)  # a fourth cannot start while three run
    release.set()
    runner.join(WAIT)
    assert result == list(range(6))
    assert at_once[1] == 3


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_first_error_stops_new_starts_and_is_raised(jobs: int) -> None:
    ran: list[int] = []

    def work(index: int, server: str, client: str) -> int:
        ran.append(index)
        if index == 1:
            raise RuntimeError("boom")
        return index

    with pytest.raises(RuntimeError, match="boom"):
        run_pairs([("a", "b"), ("a", "c"), ("a", "d")], jobs, work)  # all share a
    assert ran == [0, 1]


def test_parallel_mckey_runs_get_a_group_each() -> None:
    groups = [pair_group(i) for i in range(300)]
    assert groups[:3] == ["239.1.1.1", "239.1.2.1", "239.1.3.1"]
    assert len(set(groups)) == 300
    assert all(g.startswith("239.") for g in groups)
