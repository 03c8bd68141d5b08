"""Files labctl reads at run time that also live at the top of the source tree.

The checkout's top-level `Vagrantfile`, `docker/node-image.conf` and `topologies/` are
the source of truth: people edit them there (Vagrant users run `vagrant up` in the
checkout, docs and editors point at topologies/, other work changes them), and they must
stay plain files (Windows checkouts do not keep symlinks). This directory holds committed
copies so that the package is whole wherever it is installed, and labctl always reads
these copies (`data_path`). A build step copying them in would not do: an sdist has no
top-level tree to copy from. `python -m labctl.data` refreshes the copies; a unit test
fails while any copy differs from its source.
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent

# Top-level files (globs, relative to the checkout) copied here under the same paths.
SOURCES = ("Vagrantfile", "docker/node-image.conf", "topologies/*.yaml", "topologies/schema.json")


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
                  if p.is_file() and p.suffix not in (".py", ".pyc"))
