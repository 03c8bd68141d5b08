"""The labs of this state directory as commands name them: which are up, the one a
command means (--lab, LABCTL_LAB, else the only one), what is left of one, and a lab's
picture from its files. The CLI finds its labs here, not in the lab directory's code
(store/). Imported as --lab is parsed: what is heavy is imported where it is needed."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from labctl.store.labdir import (
    DEFAULT_LAB_ENV,
    LabDir,
    check_lab_name,
    default_lab,
    find_labdir,
    lab_dir_names,
    running_labs,
)
from labctl.topology.model import LAB_NAME_RE

if TYPE_CHECKING:
    from labctl.topology.graph import Graph
    from labctl.topology.resolved import Lab

__all__ = ["DEFAULT_LAB_ENV", "check_lab_name", "default_lab", "every_lab",
           "find_labdir", "lab_graph", "lab_made", "lab_of", "running_labs"]


def lab_made(name: str) -> bool:
    """Lab `name` was made, at least in part (its lab.json or state.json is there)."""
    return LabDir(name).exists()


def lab_of(name: str) -> Lab:
    """The lab `name` as its lab.json says (checked as every read of it is)."""
    return LabDir(name).load_lab()


def every_lab() -> list[str]:
    """The labs of the state dir (a lab directory, even a corrupt or half-made one). With
    the default state dir also the labs whose directory is gone but whose netns remains;
    a separate LABCTL_STATE_DIR is a separate set of labs: another's netns is not its own."""
    from labctl.net import labnet  # pyroute2: only for the commands that ask

    names = set(lab_dir_names())
    if "LABCTL_STATE_DIR" not in os.environ:
        names |= {ns.removeprefix(labnet.NETNS_PREFIX) for ns in labnet.lab_namespaces()}
    return sorted(n for n in names if re.fullmatch(LAB_NAME_RE, n))  # never a path like ".."


def lab_graph(name: str | None) -> Graph:
    """A lab that is up, from its files: the recorded device and port state of each node."""
    from labctl.store.state import CorruptStateError
    from labctl.topology.graph import Recorded, build_graph

    labdir = find_labdir(name)
    lab = labdir.load_lab()
    try:
        state = labdir.load_state()
    except CorruptStateError:  # the picture needs lab.json only; `status` reports the rest
        return build_graph(lab, phase="?")
    recorded = {n: Recorded(device=s.rdma_dev, port_state=s.port_state)
                for n, s in state.nodes.items()}
    return build_graph(lab, recorded, phase=str(state.phase))
