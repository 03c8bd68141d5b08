"""A lab's scratch tmpfs (labctl/store/scratch.py, what `lesson grade` stages students'
files on): `down` removes it with the lab, mounted or not, and a link planted in its place
is removed, never followed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from labctl.lab import lifecycle
from labctl.store import scratch


def test_down_of_a_lab_removes_its_scratch_folder_and_says_so(state_dir: Path) -> None:
    folder = scratch.scratch_folder("grade")
    folder.mkdir(parents=True)
    (folder / "lesson.c").write_text("int main(void) { return 0; }\n")
    removed = lifecycle.destroy("grade")
    assert removed == [f"scratch folder {folder}"]
    assert not folder.exists() and not folder.parent.exists()
    assert lifecycle.destroy("grade") == []  # nothing left to remove


def test_a_link_in_the_scratch_folders_place_is_removed_not_followed(
        state_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep").write_text("x")
    folder = scratch.scratch_folder("grade")
    folder.parent.mkdir(parents=True)
    folder.symlink_to(target)
    assert scratch.remove_scratch("grade") == f"scratch folder {folder}"
    assert not os.path.lexists(folder)
    assert (target / "keep").read_text() == "x"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_the_tmpfs_is_mounted_with_its_size_and_down_unmounts_it(state_dir: Path) -> None:
    folder = scratch.make_scratch("grade", 16)
    try:
        assert os.path.ismount(folder)
        fs = os.statvfs(folder)
        assert fs.f_blocks * fs.f_frsize == 16 << 20
        assert scratch.make_scratch("grade", 16) == folder  # mounted once, not twice
        assert lifecycle.destroy("grade") == [f"scratch folder {folder}"]
        assert not os.path.ismount(folder) and not folder.exists()
    finally:
        if os.path.ismount(folder):
            subprocess.run(["umount", str(folder)], timeout=30, check=False)
