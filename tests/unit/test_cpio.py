"""The initramfs writer produces archives that GNU cpio reads back exactly."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from labctl.images.cpio import CpioWriter


def test_parents_are_created_before_their_children() -> None:
    archive = CpioWriter()
    archive.file("a/b/c.txt", b"x")
    names = []
    data = archive.render()
    offset = 0
    while True:
        namesize = int(data[offset + 94 : offset + 102], 16)
        filesize = int(data[offset + 54 : offset + 62], 16)
        name = data[offset + 110 : offset + 110 + namesize - 1].decode()
        names.append(name)
        if name == "TRAILER!!!":
            break
        offset += (110 + namesize + 3) // 4 * 4
        offset += (filesize + 3) // 4 * 4
    assert names == ["a", "a/b", "a/b/c.txt", "TRAILER!!!"]


@pytest.mark.skipif(shutil.which("cpio") is None, reason="GNU cpio not installed")
def test_gnu_cpio_extracts_the_same_tree(tmp_path: Path) -> None:
    archive = CpioWriter()
    archive.file("etc/labctl/node.env", b"LABCTL_NODE=node1\n", 0o600)
    archive.file("bin/tool", b"#!/bin/sh\n", 0o755)
    archive.symlink("bin/alias", "tool")
    (tmp_path / "a.cpio").write_bytes(archive.render())
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["cpio", "-idm", "--quiet", "-F", str(tmp_path / "a.cpio")], cwd=out,
                   check=True)
    assert (out / "etc/labctl/node.env").read_bytes() == b"LABCTL_NODE=node1\n"
    assert (out / "etc/labctl/node.env").stat().st_mode & 0o777 == 0o600
    assert (out / "bin/tool").stat().st_mode & 0o777 == 0o755
    assert (out / "bin/alias").readlink() == Path("tool")
