"""What a topology may ask of the host: which host folders its `mounts:` may share, and how
much memory, CPU and how many PCI slots its nodes may take.

A topology file comes from elsewhere (shared, downloaded), and a node runs code as root:
a folder mounted in a node is the node's to read and, unless `:ro`, to write (over 9p with
security_model=none, as the user labctl runs as: root). So a mount of the host's system
directories or of labctl's own state is refused unless the user names it on the command
line (`--allow-host-mount PATH`), never in the file itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from labctl.paths import cache_root, state_root

FLAG = "--allow-host-mount"

# Trees (the directory and everything under it) where the host's software, configuration,
# kernel interfaces, run-time state or root's own files live: read, they leak secrets
# (/etc/shadow, /root/.ssh); written, they are the host (a binary, a cron job, a device).
# /lib32, /libx32 and /lib64 are the multilib variants of /lib; /opt holds installed
# software like /usr; /var holds services' state (databases, spools, docker's images).
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32",
                "/opt", "/proc", "/root", "/run", "/sbin", "/sys", "/usr", "/var")
# Folders of keys and credentials, wherever they are (~/.ssh of any user, a copy of one):
# read, they hand the node the host's keys; written, its authorized_keys.
KEY_FOLDERS = (".ssh", ".gnupg")
# Refused themselves, their subdirectories allowed (see refusal()): the root (everything),
# /home and each user's whole home (shell startup files and ~/.ssh: written, they run code
# as that user), and /tmp (every user's and service's sockets). A project under a home
# directory (/home/me/src) or under /tmp is what mounts are for.


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(path))


def _labctl_dirs() -> list[tuple[str, Path]]:
    return [("labctl's state directory", _real(state_root())),
            ("labctl's image cache", _real(cache_root()))]


def refusal(resolved: Path) -> str | None:
    """Why the host folder `resolved` (symlinks and `..` resolved) is one a topology may
    not mount without the command-line flag ("a system directory of the host"), or None."""
    if resolved == Path("/"):
        return "the host's root directory"
    # The trees as named first (/usr/bin is inside /usr), then where they lead (/lib ->
    # /usr/lib on a merged-/usr host: a folder under /usr/lib is refused either way).
    for trees in (SYSTEM_TREES, tuple(str(_real(t)) for t in SYSTEM_TREES)):
        for tree in trees:
            if resolved == Path(tree):
                return "a system directory of the host"
            if Path(tree) in resolved.parents:
                return f"inside the host's system directory {tree}"
    if resolved == Path("/home"):
        return "the root of every user's home directory"
    for name in KEY_FOLDERS:
        if name in resolved.parts:
            return f"a folder of keys ({name})"
    if resolved == Path("/tmp"):
        return "the host's shared /tmp (every user's and service's sockets)"
    if resolved.parent == Path("/home"):
        return "a whole home directory (its shell startup files and ~/.ssh)"
    for name, path in _labctl_dirs():
        if resolved == path:
            return name
        if path in resolved.parents:
            return f"inside {name} {path}"
        if resolved in path.parents:
            return f"a parent of {name} {path}"
    return None


def allowed(resolved: Path, allowances: tuple[Path, ...]) -> bool:
    """Whether the user allowed `resolved` on the command line: it is one of the folders
    named with --allow-host-mount, or inside one."""
    return any(resolved == a or a in resolved.parents for a in allowances)


def resolve_allowances(paths: tuple[str, ...] | list[str]) -> tuple[Path, ...]:
    """--allow-host-mount values, resolved as mounts are (from the working directory)."""
    return tuple(_real(os.path.abspath(os.path.expanduser(p))) for p in paths)


@dataclass(frozen=True)
class HostFacts:
    """The host's figures the topology checks compare with (injected by the tests)."""

    memory_mib: int
    cpus: int

    @classmethod
    def this(cls) -> HostFacts:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return cls(memory_mib=pages >> 20, cpus=os.cpu_count() or 1)


# qemu's `pc` machine (i440FX): 32 slots on PCI bus 0, two taken by the host bridge and the
# PIIX3 (ISA, IDE, USB, ACPI), four by what labctl gives every node (machine.py's argv:
# the root disk, the management NIC, virtio-rng, virtio-balloon), one per mount (a
# virtio-9p device). Measured with qemu 7.2: 26 lab NICs beside those four boot, a 27th
# gives "PCI: no slot/function available".
QEMU_PC_SLOTS = 32 - 2 - 4
