"""Host folders in vagrant-libvirt nodes booted from labctl's box.

The Vagrantfile gives each `mounts:` entry as a virtiofs synced folder: libvirt starts one
virtiofsd per folder, as root, so the node reads and writes the folder whatever its
owner (a 9p share is served by qemu itself, which libvirt runs as libvirt-qemu: that user
cannot enter folders under /root or /tmp/pytest-of-root and cannot write root's files).
virtiofsd of Debian 12 and libvirt 9.0 have no read-only export, so a `:ro` folder is
shared through a read-only bind mount of it made here, LABDIR/mounts/NODE-INDEX: the
host kernel refuses every write through it, whatever the node does. The Vagrantfile
names the same path (`readonly_source`). `down` unmounts them before anything else, and
also those an interrupted `up` left.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from labctl.errors import LabctlError
from labctl.topology.resolved import Lab

MOUNTS_DIR = "mounts"


def readonly_source(labdir: Path, node: str, index: int) -> Path:
    """Where a node's `:ro` folder is bind-mounted read-only (the Vagrantfile agrees)."""
    return labdir / MOUNTS_DIR / f"{node}-{index}"


def _mounted(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mountinfo") as info:
        return any(line.split()[4] == target for line in info if len(line.split()) > 4)


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL)


def bind_readonly(lab: Lab, labdir: Path) -> list[Path]:
    """Bind-mount every `:ro` folder read-only under LABDIR/mounts; the paths made."""
    made: list[Path] = []
    for node in lab.nodes:
        for index, mount in enumerate(node.mounts):
            if not mount.readonly:
                continue
            point = readonly_source(labdir, node.name, index)
            point.mkdir(parents=True, exist_ok=True)
            if _mounted(point):
                made.append(point)
                continue
            for argv in (["mount", "--bind", mount.source, str(point)],
                         ["mount", "-o", "remount,bind,ro", str(point)]):
                result = _run(argv)
                if result.returncode != 0:
                    unbind(labdir)
                    raise LabctlError(
                        f"cannot share {mount.source} read-only with node {node.name}: "
                        f"{' '.join(argv)}: {result.stderr.strip()}",
                        hint="run labctl as root (read-only folders are read-only bind "
                        "mounts on the host)")
            made.append(point)
    return made


def unbind(labdir: Path) -> list[str]:
    """Unmount what bind_readonly made (also after an interrupted `up`); raise when one
    stays mounted, so the lab directory (with the user's folder inside) is kept."""
    base = labdir / MOUNTS_DIR
    if not base.is_dir():
        return []
    removed: list[str] = []
    for point in sorted(base.iterdir()):
        while _mounted(point):
            result = _run(["umount", str(point)])
            if result.returncode != 0:
                raise LabctlError(
                    f"cannot unmount {point}: {result.stderr.strip()}",
                    hint=f"stop what uses it (fuser -vm {point}), then `labctl down` again")
            removed.append(f"read-only bind mount {point.name}")
        point.rmdir()
    base.rmdir()
    return removed
