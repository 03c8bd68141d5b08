"""Where labctl keeps lab state and cached images (overridable by environment)."""

from __future__ import annotations

import os
from pathlib import Path

from labctl.errors import UsageError

DEFAULT_STATE_ROOT = Path("/var/lib/labctl/labs")
# Linux's PATH_MAX and NAME_MAX, less what labctl adds below the root (a lab's directory
# and its files): past them every open() is ENAMETOOLONG, once a traceback.
_ROOT_MAX = 3072
_NAME_MAX = 255


def _root(variable: str, value: str) -> Path:
    """The directory an environment variable names, refused (exit 2) when it is too long
    to hold labctl's files or holds a NUL."""
    names = value.split("/")
    if (len(value.encode(errors="surrogateescape")) > _ROOT_MAX or "\0" in value
            or any(len(n.encode(errors="surrogateescape")) > _NAME_MAX for n in names)):
        shown = value if len(value) <= 60 else value[:60] + "…"
        raise UsageError(f"{variable}={shown!r} is not a directory labctl can use "
                         f"({len(value)} characters)",
                         hint=f"give a path of at most {_ROOT_MAX} bytes whose names have "
                              f"at most {_NAME_MAX} bytes each, or unset {variable}")
    return Path(value)


def state_root() -> Path:
    """Directory holding one subdirectory per running lab."""
    return _root("LABCTL_STATE_DIR", os.environ.get("LABCTL_STATE_DIR",
                                                    str(DEFAULT_STATE_ROOT)))


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
        return _root("LABCTL_CACHE_DIR", os.environ["LABCTL_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return _root("XDG_CACHE_HOME", xdg) / "labctl"


def records_root() -> Path:
    """labctl's own records of what it made (a saved machine's checksums, a lab's
    --allow-host-mount opt-ins): outside the image cache and the lab directories, whose
    contents may come from elsewhere (a CI cache, a copied state dir), and the same for
    every state dir. Root's own folder; LABCTL_RECORDS_DIR moves it (tests)."""
    return _root("LABCTL_RECORDS_DIR",
                 os.environ.get("LABCTL_RECORDS_DIR", str(DEFAULT_STATE_ROOT.parent / "records")))
