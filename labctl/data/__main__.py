"""`python -m labctl.data [CHECKOUT]`: refresh labctl/data from the checkout's top level."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from labctl.data import DATA_DIR, copied_files, source_files


def sync(checkout: Path) -> list[str]:
    """Copy every source file here and remove copies whose source is gone; say what changed."""
    changed = []
    sources = source_files(checkout)
    for rel in sources:
        src, dst = checkout / rel, DATA_DIR / rel
        if not dst.is_file() or dst.read_bytes() != src.read_bytes():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            changed.append(f"copied {rel}")
    for rel in set(copied_files()) - set(sources):
        (DATA_DIR / rel).unlink()
        changed.append(f"removed {rel}")
    return changed


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else DATA_DIR.parent.parent
    if not (root / "Vagrantfile").is_file():
        sys.exit(f"{root} is not an rdma-lab checkout (no Vagrantfile)")
    for line in sync(root) or ["labctl/data is up to date"]:
        print(line)
