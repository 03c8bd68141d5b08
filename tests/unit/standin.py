"""A lab made as `up` makes it, with its nodes' qemu stood in by processes carrying their
-pidfile markers and the console log captured from a live lab: what the trust tests point
hostile node replies at (the `lab_running` fixture, tests/unit/conftest.py)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from labctl.nodeside import reply
from labctl.store.labdir import LabDir
from labctl.store.state import LabState
from labctl.topology.load import load_lab

ROOT = Path(__file__).resolve().parents[2]
CAPTURED = Path(__file__).parent / "outputs" / "status"
GOOD_STATUS = (CAPTURED / "node1-status.json").read_text()  # a live node's status payload
# ...as the node sends it: one line of labctl's reply format (labctl/nodeside/reply.py)
GOOD_STATUS_REPLY = reply.line(json.loads(GOOD_STATUS)) + "\n"
LAB = "ut-replies"


def make_lab(state: Path, topology: str = "two-node.yaml") -> LabDir:
    lab = dataclasses.replace(load_lab(ROOT / "topologies" / topology), name=LAB)
    labdir = LabDir(LAB, state)
    labdir.create(lab)
    labdir.save_state(LabState.from_json((CAPTURED / "state.json").read_text()))
    return labdir


def stand_in_qemu(labdir: LabDir, node: str) -> subprocess.Popen[bytes]:
    """A process that labctl takes for `node`'s qemu (its -pidfile is the node's)."""
    labdir.node_dir(node).mkdir(parents=True, exist_ok=True)
    pidfile = labdir.node_dir(node) / "qemu.pid"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)",
                             "-pidfile", str(pidfile)])
    pidfile.write_text(f"{proc.pid}\n")
    state = labdir.load_state()
    state.nodes[node].pid = proc.pid
    labdir.save_state(state)
    (labdir.node_dir(node) / "console.log").write_text(
        (CAPTURED / "node1-console.log").read_text())
    return proc
