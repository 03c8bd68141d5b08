"""Where labctl keeps lab state and cached images (overridable by environment)."""

from __future__ import annotations

import os
from pathlib import Path


def state_root() -> Path:
    """Directory holding one subdirectory per running lab."""
    return Path(os.environ.get("LABCTL_STATE_DIR", "/var/lib/labctl/labs"))


def cache_root() -> Path:
    """Directory holding built node images, reused across labs and runs."""
    if "LABCTL_CACHE_DIR" in os.environ:
        return Path(os.environ["LABCTL_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "labctl"
