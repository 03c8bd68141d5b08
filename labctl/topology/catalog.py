"""Shipped topologies: the ones labctl carries (labctl/data/topologies), usable by name.

`labctl up two-node` and `labctl up topologies/two-node.yaml` mean the same lab: an
argument that names an existing file is that file; a bare name (no directory, no .yaml)
is a shipped topology.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from labctl.data import data_path
from labctl.errors import UsageError

SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class Shipped:
    name: str  # the file's stem, what `labctl up NAME` takes
    path: Path


def shipped_dir() -> Path:
    return data_path("topologies")


def shipped() -> list[Shipped]:
    """Every shipped topology, by name."""
    files = sorted(p for p in shipped_dir().iterdir() if p.suffix in SUFFIXES and p.is_file())
    return [Shipped(p.stem, p) for p in files]


def shipped_names() -> list[str]:
    return [t.name for t in shipped()]


def _looks_like_a_path(arg: str) -> bool:
    return "/" in arg or arg.endswith(SUFFIXES) or arg.startswith(".")


def _exists(path: Path) -> bool:
    """path.exists(); a name the OS refuses (too long) counts as a path, never as a
    shipped topology's name: reading it then says what is wrong, with exit 2."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return True


def find_topology(arg: str | Path) -> Path:
    """The topology file `arg` means: an existing file, a path (whose reading then reports
    what is wrong with it), or the name of a shipped topology."""
    text = str(arg)
    path = Path(text)
    if _looks_like_a_path(text) or _exists(path):
        return path
    for topology in shipped():
        if topology.name == text:
            return topology.path
    raise UsageError(
        f"{text!r} is neither a topology file nor a shipped topology",
        hint=f"shipped topologies: {', '.join(shipped_names())} (`labctl topologies`);"
        " or give the path of a YAML file",
    )
