"""What a provider writes of its lab's state during a lifecycle step, and nothing more.

The lifecycle (labctl/lab/lifecycle.py) owns state.json: it writes it before anything
exists, sets the phase and saves at the end of every step. A provider gets this recorder
for the step: it records each node the moment it exists (a qemu pid, a container) and the
lab's own facts before it makes what they name (the engine before its containers), so that
a crash half-way leaves `down` something to find. It never sets the phase.
"""

from __future__ import annotations

import threading

from labctl.store.labdir import LabDir
from labctl.store.state import EngineState, LabState, NodeState


class StateRecorder:
    def __init__(self, labdir: LabDir, state: LabState) -> None:
        self._labdir = labdir
        self.state = state  # read by the provider (a repair's recorded nodes); the lifecycle's
        self._lock = threading.Lock()  # a provider may record from one thread per host

    def node(self, name: str, info: NodeState, *, save: bool = True) -> None:
        """`name`'s record, saved at once; with save=False only kept, for a save() that
        records a whole batch: a provider that starts many nodes in a row, each found by
        a mark of its own meanwhile (a qemu's pidfile), writes state.json once, not once
        per node (each write is the whole lab's: per node, a lab's writes grew with the
        square of its nodes)."""
        with self._lock:
            self.state.nodes[name] = info
            if save:
                self._save()

    def save(self) -> None:
        """Save what was recorded."""
        with self._lock:
            self._save()

    def facts(self, *, accel: str | None = None, engine: EngineState | None = None,
              veths: list[str] | None = None, vagrant_provider: str | None = None) -> None:
        """The lab's own facts (those given), saved at once."""
        with self._lock:
            if accel is not None:
                self.state.accel = accel
            if engine is not None:
                self.state.engine = engine
            if veths is not None:
                self.state.veths = veths
            if vagrant_provider is not None:
                self.state.vagrant_provider = vagrant_provider
            self._save()

    def _save(self) -> None:
        self._labdir.save_state(self.state)
