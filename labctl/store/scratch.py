"""A lab's scratch folder: a tmpfs of its own that the lab mounts in its nodes (`lesson
grade` stages one student's files there, and a student's program, root in its node,
writes there without being able to fill the host's disk).

It lives under the state directory beside the labs, in a hidden folder where no lab's name
can be, and not in the lab's directory: it must exist before `up` makes that. `down`
removes it with the lab (labctl.lab.lifecycle.destroy), so no mount outlives its lab.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

from labctl import hostproc, paths, safefs
from labctl.errors import LabctlError

SCRATCH_DIR = ".scratch"
MOUNT_SECONDS = 30.0


def scratch_folder(lab: str) -> Path:
    """Where lab `lab`'s scratch tmpfs is mounted (`lab` is a checked lab name)."""
    return paths.state_root() / SCRATCH_DIR / lab


def make_scratch(lab: str, mib: int) -> Path:
    """Lab `lab`'s scratch folder, made, with a tmpfs of `mib` MiB mounted on it."""
    folder = scratch_folder(lab)
    root = paths.state_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LabctlError(f"cannot make {root}: {exc.strerror}",
                          hint="labctl needs its state directory (run it as root)") from None
    safefs.make_dirs(folder, root, 0o755)
    if not os.path.ismount(folder):
        hostproc.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m,mode=0755,nosuid,nodev",
                      "labctl-scratch", str(folder)], timeout=MOUNT_SECONDS,
                     what=f"mounting a {mib} MiB tmpfs on {folder}",
                     hint="labctl runs as root, on a host that can mount a tmpfs")
    return folder


def remove_scratch(lab: str) -> str | None:
    """Unmount and remove lab `lab`'s scratch folder; what was removed, None when there
    was none. A link in its place is removed, never followed."""
    folder = scratch_folder(lab)
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(info.st_mode) and os.path.ismount(folder):
        hostproc.run(["umount", str(folder)], timeout=MOUNT_SECONDS,
                     what=f"unmounting the tmpfs on {folder}",
                     hint=f"`umount {folder}` by hand once nothing uses it")
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(folder)
    else:
        folder.unlink()
    with contextlib.suppress(OSError):  # the last scratch folder: nothing left behind
        folder.parent.rmdir()
    return f"scratch folder {folder}"
