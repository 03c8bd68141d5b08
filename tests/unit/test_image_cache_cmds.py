"""`labctl image list` sizes, `labctl image rm`, `labctl image prune` and `labctl version`
on fake caches under tmp_path: what is current stays, old keys go with what was made from
them, a lab that is up keeps its image, a link is removed as a link and never followed."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest

from labctl.cli import version as version_cmd
from labctl.data.recipes import RECIPES
from labctl.images import cache
from labctl.images.builder import built_artifacts_dir, image_dir
from labctl.locks import blocking_lock
from labctl.store.labdir import LabDir
from labctl.store.state import LabState, NodeState
from labctl.topology.load import load_lab
from tests.unit.clirun import run_main
from tests.unit.jsonshape import parsed

ROOT = Path(__file__).resolve().parents[2]
OLD = "trixie-00000000000000aa"  # an image key no recipe gives today


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    cache_dir, state_dir = tmp_path / "cache", tmp_path / "state"
    cache_dir.mkdir()
    state_dir.mkdir()
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(cache_dir))
    monkeypatch.setenv("LABCTL_STATE_DIR", str(state_dir))
    monkeypatch.setenv("COLUMNS", "300")
    return cache_dir, state_dir


def _image(cache_dir: Path, key: str, rootfs: int = 1 << 20) -> Path:
    """An image directory as the builder leaves it, its root disk sparse: `rootfs` bytes
    long, one 4 KiB block written."""
    path = cache_dir / "images" / key
    path.mkdir(parents=True)
    for name in ("vmlinux", "initrd.cpio"):
        (path / name).write_bytes(b"k" * 4096)
    with (path / "root.ext4").open("wb") as f:
        f.write(b"r" * 4096)
        f.truncate(rootfs)
    (path / "manifest.json").write_text(json.dumps({
        "name": key.rsplit("-", 1)[0], "key": key, "suite": "trixie",
        "kernel_suite": "trixie-backports", "kernel": "6.12", "rdma_core": "56.1-1",
        "siw": True, "packages": {}, "added_packages": [], "rootfs_bytes": rootfs,
        "build_seconds": 1.0}))
    logs = cache_dir / "images" / "logs"
    logs.mkdir(exist_ok=True)
    (logs / f"{key}.build.log").write_text("built\n")
    return path


def _made_from(cache_dir: Path, key: str) -> list[Path]:
    """A saved machine, a box and a Docker data disk of image `key`."""
    saved = cache_dir / "saved" / f"{key}-0123456789abcdef"
    box = cache_dir / "boxes" / f"{key}-ba9876543210"
    disk = cache_dir / "docker-host" / f"{key}.docker.ext4"
    for folder in (saved, box):
        folder.mkdir(parents=True)
        (folder / "file").write_bytes(b"s" * 8192)
    disk.parent.mkdir(exist_ok=True)
    disk.write_bytes(b"d" * 4096)
    return [saved, box, disk]


def _current_key() -> str:
    return image_dir(RECIPES["trixie"]).name


def _up_lab(state_dir: Path, argv: list[str]) -> None:
    """A qemu lab that is up, of trixie nodes, its first node's command line `argv`."""
    lab = dataclasses.replace(load_lab(ROOT / "topologies" / "two-node.yaml"), name="uplab")
    labdir = LabDir("uplab", state_dir)
    labdir.create(lab)
    labdir.save_state(LabState(provider="qemu", nodes={
        lab.nodes[0].name: NodeState(argv=argv)}))


def _json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
          schema: str, *args: str) -> object:
    code, out, err = run_main(monkeypatch, capsys, *args, "--json")
    assert code == 0, err
    return parsed(schema, out)


# --- sizes -------------------------------------------------------------------------------
def test_disk_bytes_counts_allocated_blocks_and_never_follows_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(b"x" * (1 << 20))  # 1 MiB a link must not count
    entry = tmp_path / "entry"
    entry.mkdir()
    with (entry / "sparse").open("wb") as f:
        f.write(b"y" * 4096)
        f.truncate(1 << 30)  # 1 GiB long, one block written
    (entry / "link").symlink_to(outside)
    os.link(entry / "sparse", entry / "hard")  # a second name: counted once
    used = cache.disk_bytes(entry)
    blocks = sum(p.lstat().st_blocks * 512 for p in (entry, entry / "sparse", entry / "link"))
    assert used == blocks
    assert used < 1 << 20


def test_image_list_shows_each_entrys_size_and_the_total(
        dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    cache_dir, _ = dirs
    current = _image(cache_dir, _current_key(), rootfs=1 << 30)
    _image(cache_dir, OLD)
    _made_from(cache_dir, OLD)
    listed = _json(monkeypatch, capsys, "image-list", "image", "list")
    by_path = {e.path: e for e in listed.cache.entries}  # type: ignore[attr-defined]
    assert by_path[str(current)].kind == "image" and by_path[str(current)].current
    assert by_path[str(cache_dir / "images" / OLD)].current is False
    assert {e.kind for e in listed.cache.entries} == {  # type: ignore[attr-defined]
        "image", "log", "saved", "box", "docker-disk"}
    image = next(i for i in listed.images if i.path == str(current))  # type: ignore[attr-defined]
    # the 1 GiB sparse root disk counts the blocks it uses, not its length
    assert 12 << 10 <= image.disk_bytes < 1 << 20
    assert image.disk_bytes == cache.disk_bytes(current)
    assert listed.cache.total_bytes == sum(  # type: ignore[attr-defined]
        e.disk_bytes for e in listed.cache.entries)  # type: ignore[attr-defined]
    code, out, _ = run_main(monkeypatch, capsys, "image", "list")
    assert code == 0
    assert "on disk" in out
    assert f"cache total: {listed.cache.total_bytes >> 10} KiB on disk in {cache_dir}" in out  # type: ignore[attr-defined]
    assert "saved machines" in out and "Docker data disks" in out


def test_removing_through_a_cache_that_is_a_link_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A linked cache is listed, but rm and prune remove nothing through the link."""
    real = tmp_path / "real"
    real.mkdir()
    old = _image(real, OLD)
    (tmp_path / "link").symlink_to(real)
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path / "link"))
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "state"))
    for args in (("image", "prune"), ("image", "prune", "--all"), ("image", "rm", OLD)):
        code, out, err = run_main(monkeypatch, capsys, *args)
        assert code == 2 and out == "", args
        text = " ".join(err.split())
        assert "error: the image cache" in text and "is a symbolic link" in text
        assert "hint: point LABCTL_CACHE_DIR at the directory it names" in text
        assert "Traceback" not in err
    assert old.is_dir()
    code, out, _ = run_main(monkeypatch, capsys, "image", "list", "--json")
    assert code == 0
    assert [i.key for i in parsed("image-list", out).images] == [OLD]


# --- prune -------------------------------------------------------------------------------
def test_prune_removes_old_keys_and_what_was_made_from_them_and_keeps_current(
        dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    cache_dir, _ = dirs
    current = _image(cache_dir, _current_key())
    kept_made = _made_from(cache_dir, _current_key())
    old = _image(cache_dir, OLD)
    old_made = _made_from(cache_dir, OLD)
    built_now = built_artifacts_dir(RECIPES["trixie"])
    built_old = cache_dir / "images" / ".built" / "trixie-000000000000"
    for folder in (built_now, built_old):
        folder.mkdir(parents=True)
        (folder / "siw.ko").write_bytes(b"m" * 4096)
    debs = cache_dir / "images" / ".debs"
    debs.mkdir()
    fresh, stale = debs / "fresh.deb", debs / "stale.deb"
    fresh.write_bytes(b"p")
    stale.write_bytes(b"p")
    month_ago = time.time() - 30 * 86400
    os.utime(stale, (month_ago, month_ago))
    # decoys: files outside the cache that links inside it point at
    decoy = cache_dir.parent / "decoy"
    decoy.mkdir()
    (decoy / "precious").write_text("keep me\n")
    (old / "link-out").symlink_to(decoy)
    (debs / "linked.deb").symlink_to(decoy / "precious")
    os.utime(debs / "linked.deb", (month_ago, month_ago), follow_symlinks=False)
    lock = cache_dir / "images" / f".lock-{_current_key()}"
    lock.write_text("")
    # other makers' locks and work in progress: never entries
    hidden = [cache_dir / "saved" / f".{OLD}-0123456789abcdef.lock",
              cache_dir / "boxes" / f".lock-{OLD}-ba9876543210",
              cache_dir / "saved" / f".make-{OLD}-0123456789abcdef-1-99"]
    for path in hidden:
        path.write_text("")

    dry = _json(monkeypatch, capsys, "image-prune", "image", "prune", "--dry-run")
    assert dry.dry_run is True  # type: ignore[attr-defined]
    would = {e.path for e in dry.removed}  # type: ignore[attr-defined]
    assert would == {str(p) for p in [old, *old_made, built_old, stale,
                                      cache_dir / "images" / "logs" / f"{OLD}.build.log"]}
    assert old.is_dir() and stale.exists()  # nothing removed by a dry run
    assert dry.freed_bytes == sum(e.disk_bytes for e in dry.removed) > 0  # type: ignore[attr-defined]

    done = _json(monkeypatch, capsys, "image-prune", "image", "prune")
    assert {e.path for e in done.removed} == would  # type: ignore[attr-defined]
    assert not any(os.path.lexists(p) for p in would)
    for kept in (current, *kept_made, built_now, fresh, lock, debs / "linked.deb", *hidden):
        assert os.path.lexists(kept), kept
    assert (decoy / "precious").read_text() == "keep me\n"

    code, out, _ = run_main(monkeypatch, capsys, "image", "prune")
    assert code == 0
    assert "nothing to remove" in out and "freed 0 KiB" in out


def test_prune_all_keeps_only_what_a_lab_that_is_up_uses(
        dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    cache_dir, state_dir = dirs
    current = _image(cache_dir, _current_key())
    old = _image(cache_dir, OLD)
    old_made = _made_from(cache_dir, OLD)
    other = _image(cache_dir, "sid-00000000000000bb")
    stray = cache_dir / "stray-file"
    stray.write_text("x")
    decoy = cache_dir.parent / "decoy.txt"
    decoy.write_text("keep me\n")
    linked = cache_dir / "boxes" / "linked"
    linked.parent.mkdir(exist_ok=True)
    linked.symlink_to(decoy)
    # the lab's node runs from the old image (its command line names it)
    _up_lab(state_dir, ["qemu-system-x86_64", "-kernel", f"{old}/vmlinux"])

    code, out, err = run_main(monkeypatch, capsys, "image", "prune", "--all")
    assert code == 0, err
    assert f"kept {OLD}: a lab that is up uses it" in out
    for gone in (other, stray, linked):
        assert not os.path.lexists(gone), gone
    # the lab's nodes are trixie: today's trixie image stays too
    for kept in (current, old, *old_made):
        assert kept.exists(), kept
    assert decoy.read_text() == "keep me\n"
    assert "removed entry" in out and "freed" in out


def test_a_linked_folder_of_the_cache_is_not_looked_into_and_goes_as_a_link(
        dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    cache_dir, _ = dirs
    elsewhere = cache_dir.parent / "elsewhere"
    (elsewhere / f"{OLD}-0123456789abcdef").mkdir(parents=True)  # looks like a saved one
    (elsewhere / f"{OLD}-0123456789abcdef" / "ram").write_bytes(b"x" * 4096)
    (cache_dir / "saved").symlink_to(elsewhere)
    (cache_dir / "images").mkdir()
    (cache_dir / "images" / OLD).symlink_to(elsewhere)  # an image's name, a link
    listed = _json(monkeypatch, capsys, "image-list", "image", "list")
    assert sorted((e.kind, Path(e.path).name)  # type: ignore[attr-defined]
                  for e in listed.cache.entries) == [  # type: ignore[attr-defined]
        ("other", "saved"), ("other", OLD)]
    done = _json(monkeypatch, capsys, "image-prune", "image", "prune")
    assert done.removed == []  # type: ignore[attr-defined]
    done = _json(monkeypatch, capsys, "image-prune", "image", "prune", "--all")
    assert len(done.removed) == 2  # type: ignore[attr-defined]
    assert not os.path.lexists(cache_dir / "saved")
    assert not os.path.lexists(cache_dir / "images" / OLD)
    assert (elsewhere / f"{OLD}-0123456789abcdef" / "ram").read_bytes() == b"x" * 4096


def test_prune_leaves_an_image_a_build_holds_the_lock_of(
        dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    cache_dir, _ = dirs
    old = _image(cache_dir, OLD)
    with blocking_lock(cache_dir / "images" / f".lock-{OLD}"):  # as a build holds it
        done = _json(monkeypatch, capsys, "image-prune", "image", "prune")
        assert old.is_dir()
        assert {e.path for e in done.busy} == {  # type: ignore[attr-defined]
            str(old), str(cache_dir / "images" / "logs" / f"{OLD}.build.log")}
        code, out, _ = run_main(monkeypatch, capsys, "image", "prune")
        assert code == 0
        assert f"kept {old}: a build of its image is in progress" in " ".join(out.split())
    _json(monkeypatch, capsys, "image-prune", "image", "prune")
    assert not old.exists()


def test_prune_bad_option_is_bad_input(dirs: tuple[Path, Path],
                                       monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(monkeypatch, capsys, "image", "prune", "--everything")
    assert code == 2
    assert "error: no such option: --everything" in err and "hint:" in err


# --- rm ----------------------------------------------------------------------------------
def test_rm_by_key_removes_the_image_and_what_was_made_from_it(
        dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    cache_dir, _ = dirs
    current = _image(cache_dir, _current_key())
    old = _image(cache_dir, OLD)
    made = _made_from(cache_dir, OLD)
    done = _json(monkeypatch, capsys, "image-rm", "image", "rm", OLD)
    assert {e.path for e in done.removed} == {  # type: ignore[attr-defined]
        str(p) for p in [old, *made, cache_dir / "images" / "logs" / f"{OLD}.build.log"]}
    assert not any(os.path.lexists(p) for p in [old, *made])
    assert current.is_dir()


def test_rm_by_recipe_removes_its_image_of_today(
        dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    cache_dir, _ = dirs
    current = _image(cache_dir, _current_key())
    old = _image(cache_dir, OLD)
    code, out, err = run_main(monkeypatch, capsys, "image", "rm", "trixie")
    assert code == 0, err
    assert f"removed image {current}" in " ".join(out.split())
    assert not current.exists() and old.is_dir()


@pytest.mark.parametrize(("name", "message"), [
    ("nosuch", "no image recipe or cached image named 'nosuch'"),
    ("../../etc", "no image recipe or cached image named '../../etc'"),
    ("sid", "is not in the cache"),
    ("trixie-00000000000000ff", "image trixie-00000000000000ff is not in the cache"),
])
def test_rm_of_what_is_not_there_is_bad_input(
        name: str, message: str, dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    cache_dir, _ = dirs
    _image(cache_dir, OLD)
    code, _, err = run_main(monkeypatch, capsys, "image", "rm", name)
    assert code == 2
    assert message in " ".join(err.split())
    assert err.startswith("error: ") and "hint:" in err
    assert (cache_dir / "images" / OLD).is_dir()


def test_rm_of_an_image_a_lab_that_is_up_uses_is_refused(
        dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    cache_dir, state_dir = dirs
    current = _image(cache_dir, _current_key())
    _up_lab(state_dir, [])
    code, _, err = run_main(monkeypatch, capsys, "image", "rm", "trixie")
    assert code == 2
    text = " ".join(err.split())
    assert f"error: image {_current_key()} is in use: a lab that is up uses it" in text
    assert "hint:" in text and "labctl down --lab" in text
    assert current.is_dir()


def test_a_restored_node_keeps_the_image_its_saved_machine_was_made_from(
        dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A node restored from a saved machine names only the saved machine's files (its RAM
    and disk, the saved key 16 hex digits as the image's): the image stays all the same."""
    cache_dir, state_dir = dirs
    old = _image(cache_dir, OLD)
    saved = _made_from(cache_dir, OLD)[0]
    _up_lab(state_dir, ["qemu-system-x86_64", "-incoming", f"file:{saved}/ram",
                        "-drive", f"file={saved}/disk.qcow2,if=virtio"])
    code, _, err = run_main(monkeypatch, capsys, "image", "rm", OLD)
    assert code == 2
    assert f"image {OLD} is in use" in " ".join(err.split())
    done = _json(monkeypatch, capsys, "image-prune", "image", "prune")
    assert done.removed == [] and done.in_use == [OLD]  # type: ignore[attr-defined]
    assert old.is_dir() and saved.is_dir()


def test_the_docker_host_vms_image_and_data_disk_stay(
        dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from labctl.store.state import VmInfo, write_state

    cache_dir, state_dir = dirs
    key = "docker-host-00000000000000cc"
    image = _image(cache_dir, key)
    disk = _made_from(cache_dir, key)[2]
    vm_dir = state_dir / ".docker-hosts" / "docker-host"
    vm_dir.mkdir(parents=True)
    write_state(vm_dir / "state.json", LabState(provider="qemu", vm=VmInfo(
        image=key, data_disk=str(disk))))
    done = _json(monkeypatch, capsys, "image-prune", "image", "prune", "--all")
    assert done.in_use == [key]  # type: ignore[attr-defined]
    assert image.is_dir() and disk.is_file()
    code, _, err = run_main(monkeypatch, capsys, "image", "rm", key)
    assert code == 2 and f"image {key} is in use" in " ".join(err.split())


def test_a_saved_machine_being_made_stays(
        dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    cache_dir, _ = dirs
    saved, box, disk = _made_from(cache_dir, OLD)
    with blocking_lock(saved.with_name(f".{saved.name}.lock")):  # as `up` holds it
        done = _json(monkeypatch, capsys, "image-prune", "image", "prune")
    assert [e.path for e in done.busy] == [str(saved)]  # type: ignore[attr-defined]
    assert {e.path for e in done.removed} == {str(box), str(disk)}  # type: ignore[attr-defined]
    assert saved.is_dir()


def test_rm_of_an_image_being_built_fails_and_keeps_it(
        dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    cache_dir, _ = dirs
    old = _image(cache_dir, OLD)
    with blocking_lock(cache_dir / "images" / f".lock-{OLD}"):  # as a build holds it
        code, _, err = run_main(monkeypatch, capsys, "image", "rm", OLD)
    assert code == 1
    assert f"error: a build of image {OLD} is in progress" in " ".join(err.split())
    assert "hint:" in err
    assert old.is_dir()


def test_remove_refuses_a_path_outside_the_cache(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("x")
    with pytest.raises(cache.LabctlError, match="is not in the image cache"):
        cache.remove(tmp_path / "cache", outside)
    assert outside.exists()


# --- version -----------------------------------------------------------------------------
def test_version_names_labctl_python_qemu_and_the_recipes(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    found = _json(monkeypatch, capsys, "version", "version")
    assert [r.name for r in found.recipes] == list(RECIPES)  # type: ignore[attr-defined]
    assert found.labctl and found.python.count(".") == 2  # type: ignore[attr-defined]
    code, out, _ = run_main(monkeypatch, capsys, "version")
    assert code == 0
    assert out.startswith(f"labctl {found.labctl}\nPython {found.python}\n")  # type: ignore[attr-defined]
    assert "trixie: trixie userland, kernel from trixie-backports" in out


def test_version_without_qemu_says_not_installed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    found = _json(monkeypatch, capsys, "version", "version")
    assert found.qemu is None  # type: ignore[attr-defined]
    code, out, _ = run_main(monkeypatch, capsys, "version")
    assert code == 0 and "qemu: not installed" in out


@pytest.mark.parametrize(("script", "expected"), [
    ("echo 'QEMU emulator version 9.2.0'; echo second", "QEMU emulator version 9.2.0"),
    ("exit 3", "qemu-system-x86_64 --version failed (exit 3)"),
    ("exec /bin/sleep 30", "no answer from qemu-system-x86_64 --version in 1 s"),
])
def test_version_reads_qemus_first_line_bounded_in_time(
        script: str, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    qemu = tmp_path / "qemu-system-x86_64"
    qemu.write_text(f"#!/bin/sh\n{script}\n")
    qemu.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(version_cmd, "QEMU_TIMEOUT", 1.0)
    assert version_cmd.qemu_version() == expected


def test_version_bad_option_is_bad_input(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(monkeypatch, capsys, "version", "--yaml")
    assert code == 2
    assert "error: no such option: --yaml" in err and "hint:" in err


def _kernel_entries(cache_dir: Path) -> dict[str, Path]:
    """Two own kernels made ready and two Debian kernels fetched, with their locks."""
    kernels = cache_dir / "kernels"
    made = {"booted": kernels / "6.19.0-rc1+-00000000000000aa",
            "idle": kernels / "6.12.118+deb13-amd64-00000000000000bb",
            "debian booted": kernels / "debian" / "6.12.118+deb13-amd64_6.12.118-1",
            "debian idle": kernels / "debian" / "6.12.117+deb13-amd64_6.12.117-1"}
    for path in made.values():
        path.mkdir(parents=True)
        (path / "modules.ext4").write_bytes(b"m" * 8192)
    (kernels / f".{made['booted'].name}.lock").write_text("")
    (kernels / "debian" / ".lock").write_text("")
    return made


def test_kernels_are_listed_kept_by_prune_and_removed_by_prune_all_unless_booted(
        dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The cache's kernels (own ones made ready, Debian ones fetched) are `kernel` entries
    with their size; plain prune leaves them; --all removes all but those a lab that is up
    boots (its node's command line names the made-ready one, its lab file the Debian one),
    and never a lock."""
    cache_dir, state_dir = dirs
    made = _kernel_entries(cache_dir)
    listed = _json(monkeypatch, capsys, "image-list", "image", "list")
    kinds = {e.path: e.kind for e in listed.cache.entries}  # type: ignore[attr-defined]
    assert {p: kinds.get(str(p)) for p in made.values()} == {p: "kernel" for p in made.values()}
    assert not any("/." in p for p in kinds)  # locks are no entries
    code, out, _ = run_main(monkeypatch, capsys, "image", "list")
    assert code == 0 and "kernels " in out.split("cache total:")[1]

    code, _, err = run_main(monkeypatch, capsys, "image", "prune")
    assert code == 0, err
    assert all(p.exists() for p in made.values())

    lab = load_lab(ROOT / "topologies" / "two-node.yaml")
    node = dataclasses.replace(lab.nodes[0], kernel=str(made["debian booted"]))
    lab = dataclasses.replace(lab, name="uplab", nodes=(node, *lab.nodes[1:]))
    labdir = LabDir("uplab", state_dir)
    labdir.create(lab)
    labdir.save_state(LabState(provider="qemu", nodes={node.name: NodeState(argv=[
        "qemu-system-x86_64", "-kernel", f"{made['booted']}/vmlinux", "-drive",
        f"file={made['booted']}/modules.ext4,if=virtio,readonly=on"])}))
    code, out, err = run_main(monkeypatch, capsys, "image", "prune", "--all")
    assert code == 0, err
    assert made["booted"].exists() and made["debian booted"].exists()
    assert not made["idle"].exists() and not made["debian idle"].exists()
    assert (cache_dir / "kernels" / f".{made['booted'].name}.lock").exists()
    assert (cache_dir / "kernels" / "debian" / ".lock").exists()
    assert "removed kernel" in out, out
