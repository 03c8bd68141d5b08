"""A multi-host docker lab boots its hosts, prepares them and starts their containers on
every host at once (swarm.on_each_host), and what each host made is recorded whatever
another host does."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from labctl.providers.swarm import on_each_host
from labctl.store.labdir import LabDir
from labctl.store.state import LabState, NodeState, Phase
from labctl.store.state_recorder import StateRecorder


def test_every_host_works_at_the_same_time() -> None:
    both_started = threading.Barrier(2, timeout=10)  # broken if the hosts ran one by one

    def work(host: str) -> str:
        both_started.wait()
        return host.upper()

    assert on_each_host(["h1", "h2"], work) == {"h1": "H1", "h2": "H2"}


def test_a_failed_host_fails_the_step_once_the_others_finished() -> None:
    finished: list[str] = []

    def work(host: str) -> None:
        if host == "h1":
            raise RuntimeError("h1: image check failed")
        time.sleep(0.3)
        finished.append(host)

    with pytest.raises(RuntimeError, match="h1: image check failed"):
        on_each_host(["h1", "h2", "h3"], work)
    assert sorted(finished) == ["h2", "h3"]


def test_nodes_recorded_from_several_threads_are_all_saved(tmp_path: Path) -> None:
    labdir = LabDir("swarmlab", root=tmp_path)
    labdir.path.mkdir(parents=True)
    record = StateRecorder(labdir, LabState(provider="docker", phase=Phase.CREATING))
    names = [f"node{i}" for i in range(1, 9)]
    on_each_host(names, lambda name: record.node(name, NodeState(container=name)))
    assert sorted(labdir.load_state().nodes) == sorted(names)
