"""Host folders in vagrant-libvirt nodes booted from labctl's box.

The Vagrantfile gives each `mounts:` entry as a virtiofs synced folder: libvirt starts one
virtiofsd per folder, as root, so the node reads and writes the folder whatever its
owner (a 9p share is served by qemu itself, which libvirt runs as libvirt-qemu: that user
cannot enter folders under /root or /tmp/pytest-of-root and cannot write root's files).
A `:ro` folder is shared through a read-only bind mount of it, LABDIR/mounts/NODE-INDEX
(labctl.providers.hostbinds); the Vagrantfile names the same path (`host_folders`).
"""

from __future__ import annotations

from pathlib import Path

import labctl.providers.hostbinds as hostbinds
from labctl.topology.resolved import Lab

MOUNTS_DIR = "mounts"


def readonly_source(labdir: Path, node: str, index: int) -> Path:
    """Where a node's `:ro` folder is bind-mounted read-only (the Vagrantfile agrees)."""
    return labdir / MOUNTS_DIR / f"{node}-{index}"


def bind_readonly(lab: Lab, labdir: Path) -> None:
    """Bind-mount every `:ro` folder read-only under LABDIR/mounts."""
    try:
        for node in lab.nodes:
            for index, mount in enumerate(node.mounts):
                if mount.readonly:
                    hostbinds.bind(mount.source, readonly_source(labdir, node.name, index),
                                   True, f"node {node.name}")
    except Exception:
        hostbinds.unbind_all(labdir / MOUNTS_DIR)
        raise


def unbind(labdir: Path) -> list[str]:
    """Unmount what bind_readonly made (also after an interrupted `up`)."""
    return hostbinds.unbind_all(labdir / MOUNTS_DIR)
