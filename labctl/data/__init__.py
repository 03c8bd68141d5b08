"""Files labctl reads at run time that also live at the top of the source tree.

Shipped topologies live here, in labctl/data/topologies/, and only here: the checkout's
top-level `topologies` is a symbolic link to this directory, so editing a topology through
either path edits the one file labctl reads (a copy kept in step by hand was edited at the
top and silently ignored). The package data needs real files inside the package, hence the
link points in, not out.

The Vagrantfile lives here too (OWN), the one labctl runs and the one a plain `vagrant up`
in the checkout runs: the checkout's top-level `Vagrantfile` is a few lines that load it.

The checkout's top-level `docker/node-image.conf` must stay a plain file: this directory
holds a committed copy of it so that the package is whole wherever it is installed, and
labctl always reads the copy (`data_path`). A build step copying it in would not do: an
sdist has no top-level tree to copy from. `python -m labctl.data` refreshes the copies; a
unit test fails while any copy differs from its source.
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent

# Top-level files (globs, relative to the checkout) copied here under the same paths.
# (topologies/ is not copied: it is a link to labctl/data/topologies.)
SOURCES = ("docker/node-image.conf",)
# Files that live here only (the top-level Vagrantfile loads this one; the lessons of
# `labctl lesson` have no copy at the top level).
OWN = ("Vagrantfile", "lessons")


def data_path(*parts: str) -> Path:
    """A file of labctl's own data, e.g. data_path("docker", "node-image.conf")."""
    return DATA_DIR.joinpath(*parts)


def source_files(checkout: Path) -> list[str]:
    """The top-level files that have a copy here, relative to `checkout`, sorted."""
    found = {p.relative_to(checkout).as_posix() for g in SOURCES for p in checkout.glob(g)}
    return sorted(found)


def copied_files() -> list[str]:
    """The copies this directory holds, relative to it, sorted."""
    return sorted(p.relative_to(DATA_DIR).as_posix() for p in DATA_DIR.rglob("*")
                  if p.is_file() and p.suffix not in (".py", ".pyc")
                  and p.relative_to(DATA_DIR).parts[0] not in ("topologies", *OWN))
