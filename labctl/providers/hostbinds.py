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

import contextlib
import re
from pathlib import Path

from labctl import hostproc


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


def bind(source: str, point: Path, readonly: bool, what: str) -> None:
    """`source` bind-mounted on `point` (read-only when asked); idempotent."""
    point.mkdir(parents=True, exist_ok=True)
    if mounted(point):
        return
    steps = [["mount", "--bind", source, str(point)]]
    if readonly:
        steps.append(["mount", "-o", "remount,bind,ro", str(point)])
    for argv in steps:
        try:
            hostproc.run(argv, timeout=MOUNT_SECONDS, what=f"sharing {source} with {what} "
                         f"(`{hostproc.command_line(argv)}`)",
                         hint="run labctl as root (host folders are shared through bind "
                         "mounts on the host)")
        except hostproc.HostProcessError:
            if mounted(point):  # nothing half-made: a bind without its read-only remount
                with contextlib.suppress(hostproc.HostProcessError):
                    hostproc.run(["umount", str(point)], timeout=MOUNT_SECONDS, check=False)
            raise


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
            hostproc.run(["umount", str(point)], timeout=MOUNT_SECONDS,
                         what=f"unmounting {point}",
                         hint=f"stop what uses it (fuser -vm {point}), then `labctl down` "
                         "again")
            removed.append(f"bind mount {point}")
        point.rmdir()
    base.rmdir()
    return removed
