"""Where labctl keeps lab state and cached images (overridable by environment)."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_STATE_ROOT = Path("/var/lib/labctl/labs")


def state_root() -> Path:
    """Directory holding one subdirectory per running lab."""
    return Path(os.environ.get("LABCTL_STATE_DIR", str(DEFAULT_STATE_ROOT)))


def docker_hosts_root() -> Path:
    """Where the Docker host VMs (shared by the labs of a state dir) keep their files:
    /var/lib/labctl, beside the labs, by default; inside the state dir when
    LABCTL_STATE_DIR names another one (a hidden directory, which no lab name can be),
    never in its parent: LABCTL_STATE_DIR=/tmp/x must not put files in /tmp."""
    root = state_root()
    return root.parent if root == DEFAULT_STATE_ROOT else root / ".docker-hosts"


def cache_root() -> Path:
    """Directory holding built node images, reused across labs and runs."""
    if "LABCTL_CACHE_DIR" in os.environ:
        return Path(os.environ["LABCTL_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "labctl"



def records_root() -> Path:
    """labctl's own records of what it made (a saved machine's checksums, a lab's
    --allow-host-mount opt-ins): outside the image cache and the lab directories, whose
    contents may come from elsewhere (a CI cache, a copied state dir), and the same for
    every state dir. Root's own folder; LABCTL_RECORDS_DIR moves it (tests)."""
    return Path(os.environ.get("LABCTL_RECORDS_DIR", str(DEFAULT_STATE_ROOT.parent / "records")))
