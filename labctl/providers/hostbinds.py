"""Bind mounts of a lab's host folders on the host, made by labctl and undone by `down`.

Two providers share host folders through a directory of labctl's own instead of the folder
itself:
- vagrant (libvirt): virtiofsd of Debian 12 and libvirt 9.0 have no read-only export, so a
  `:ro` folder goes to the node through a read-only bind mount of it, LABDIR/mounts/NODE-I
  (the host kernel refuses every write through it, whatever the node does);
- docker with the Docker host VM: the VM sees one labctl directory of this host over
  virtio-9p; each folder is bind-mounted under it (read-only for `:ro`), and the container
  bind-mounts the VM's path of it.
`unbind_all` unmounts everything under such a directory, also what an interrupted `up`
left, and raises while one stays mounted: a directory holding a user's folder is never
removed.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from labctl.errors import LabctlError


def mountinfo_path(field: str) -> str:
    """A path as /proc/self/mountinfo writes it: the kernel escapes space, tab, newline
    and backslash as octal (\\040...), so a state dir with a space matches only decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounted(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mountinfo") as info:
        return any(len(fields) > 4 and mountinfo_path(fields[4]) == target
                   for fields in (line.split() for line in info))


# A bind mount or unmount is instant; a source on a hung network filesystem is not.
MOUNT_SECONDS = 60


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False,
                              stdin=subprocess.DEVNULL, timeout=MOUNT_SECONDS)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"no answer in {MOUNT_SECONDS} s")


def bind(source: str, point: Path, readonly: bool, what: str) -> None:
    """`source` bind-mounted on `point` (read-only when asked); idempotent."""
    point.mkdir(parents=True, exist_ok=True)
    if mounted(point):
        return
    steps = [["mount", "--bind", source, str(point)]]
    if readonly:
        steps.append(["mount", "-o", "remount,bind,ro", str(point)])
    for argv in steps:
        result = _run(argv)
        if result.returncode != 0:
            if mounted(point):
                _run(["umount", str(point)])
            raise LabctlError(f"cannot share {source} with {what}: {' '.join(argv)}: "
                              f"{result.stderr.strip()}",
                              hint="run labctl as root (host folders are shared through "
                              "bind mounts on the host)")


def unbind_all(base: Path) -> list[str]:
    """Unmount every bind mount under `base` (one level) and remove the directory."""
    if base.is_symlink():  # not labctl's: the link goes, never what it points at
        base.unlink()
        return []
    if not base.is_dir():
        return []
    removed: list[str] = []
    for point in sorted(base.iterdir()):
        if point.is_symlink() or not point.is_dir():  # no mount point labctl made
            point.unlink()
            continue
        while mounted(point):
            result = _run(["umount", str(point)])
            if result.returncode != 0:
                raise LabctlError(
                    f"cannot unmount {point}: {result.stderr.strip()}",
                    hint=f"stop what uses it (fuser -vm {point}), then `labctl down` again")
            removed.append(f"bind mount {point}")
        point.rmdir()
    base.rmdir()
    return removed
