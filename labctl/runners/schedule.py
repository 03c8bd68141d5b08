"""Runs between several node pairs, in parallel where they share no node (`--jobs N`).

A node runs one example at a time: two runs on one node would fight over its only vCPU,
its ports and its device counters (mckey counts receives on the device). So a pair starts
when neither of its nodes is busy and fewer than `jobs` runs are going, in the order the
pairs were given; results come back in that order whatever the finishing order.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

from labctl.runners.examples import MCKEY_GROUP

T = TypeVar("T")
Pair = tuple[str, str]
MAX_JOBS = 64


def run_pairs(pairs: Sequence[Pair], jobs: int, work: Callable[[int, str, str], T]) -> list[T]:
    """`work(index, server, client)` for every pair, at most `jobs` at once and never two
    that share a node. The first exception stops new starts; it is raised once the runs
    already going have ended (each is bounded by its own timeout)."""
    if jobs < 1:
        raise ValueError(jobs)
    if jobs == 1:  # in this thread: Ctrl-C stops the run at once, as it always did
        return [work(index, server, client) for index, (server, client) in enumerate(pairs)]
    results: dict[int, T] = {}
    pending = list(enumerate(pairs))
    busy: set[str] = set()
    running: dict[Future[T], tuple[int, Pair]] = {}
    error: BaseException | None = None
    with ThreadPoolExecutor(max_workers=min(jobs, max(1, len(pairs)))) as pool:
        while pending or running:
            for item in list(pending):
                if len(running) >= jobs or error is not None:
                    break
                index, (server, client) = item
                if server in busy or client in busy:
                    continue
                pending.remove(item)
                busy.update((server, client))
                running[pool.submit(work, index, server, client)] = item
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                index, pair = running.pop(future)
                busy.difference_update(pair)
                try:
                    results[index] = future.result()
                except BaseException as exc:  # re-raised below, once the others ended
                    error = error or exc
            if error is not None:
                pending.clear()
    if error is not None:
        raise error
    return [results[i] for i in range(len(pairs))]


def pair_group(index: int) -> str:
    """mckey's multicast group for the index-th pair: runs in parallel on one segment must
    not hear each other's messages (239.1.1.1, 239.1.2.1, ...: the first is the default)."""
    return str(ipaddress.IPv4Address(MCKEY_GROUP) + 256 * (index % 60000))
