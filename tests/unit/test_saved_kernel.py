"""Saved machines per kernel: a node on a kernel of its own is restored from a machine
saved on that very kernel. The key names the kernel's cache entry, RELEASE-CONTENTHASH,
so a rebuilt bzImage (another content hash) is another key; the saved machine has the
devices of a restored node on that kernel (its modules disk after the root disk); prune
keeps a saved machine of a kernel still in the cache and removes one whose kernel went."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from labctl.images.kernels import PreparedKernel
from labctl.topology.load import load_lab
from labctl.vm import saved
from labctl.vm.machine import QemuMachine, Restore
from labctl.vm.saved import MachineShape
from tests.unit.test_restore import REPO, SHAPE, _cached_image, _image, _write_saved

RELEASE = "6.12.118+deb13-amd64"


def entry(root: Path, digest: str) -> PreparedKernel:
    """A kernel's cache entry as kernels.prepare leaves it (files empty)."""
    path = root / f"{RELEASE}-{digest}"
    path.mkdir(parents=True)
    for name in ("vmlinux", "modules.ext4"):
        (path / name).write_bytes(b"")
    kernel = PreparedKernel.at(path)
    assert kernel is not None
    return kernel


def test_the_key_names_the_kernels_content(tmp_path: Path) -> None:
    image = _image()
    first = entry(tmp_path / "a", "1111111111111111")
    same_elsewhere = entry(tmp_path / "b", "1111111111111111")  # another cache folder
    rebuilt = entry(tmp_path / "c", "2222222222222222")  # the bzImage made again
    own = saved.saved_key(image, SHAPE, first)
    assert own == saved.saved_key(image, SHAPE, same_elsewhere)  # the content, not the path
    assert len({saved.saved_key(image, SHAPE), own,
                saved.saved_key(image, SHAPE, rebuilt)}) == 3
    # the image's kernel keeps the key it had (saved machines made before stay usable)
    assert saved.saved_key(image, SHAPE) == saved.saved_key(image, SHAPE, None)


def test_a_saved_machine_on_an_own_kernel_has_a_restored_nodes_devices(
        tmp_path: Path) -> None:
    from labctl.providers.qemu import plan_lab
    lab = load_lab(REPO / "topologies" / "two-node.yaml")
    lab = dataclasses.replace(lab, nodes=tuple(
        dataclasses.replace(n, kernel="/src/linux") for n in lab.nodes))
    image = _image()
    kernel = entry(tmp_path, "1111111111111111")
    plan = plan_lab(lab, {n.name: Path("/labs/x") / n.name for n in lab.nodes},
                    {"trixie": image}, "tcg", {n.name: 40000 for n in lab.nodes},
                    {n.name: Restore(Path("/s/ram"), Path("/s/state")) for n in lab.nodes},
                    {"/src/linux": kernel})
    node_argv = plan.nodes[0].argv
    template = saved.template_argv(QemuMachine(Path("/t"), "t"), image,
                                   MachineShape.of(lab.nodes[0], "tcg"), 40001,
                                   Restore(Path("/t/ram"), None), kernel)

    def shape(argv: list[str]) -> list[str]:
        return [a + " " + argv[i + 1].split(",")[-1] if a == "-drive" else a
                for i, a in enumerate(argv) if a.startswith("-") and a != "-incoming"]

    assert shape(template) == shape(node_argv)
    for argv in (template, node_argv):
        assert argv[argv.index("-kernel") + 1] == str(kernel.boot)
        assert f"file={kernel.modules_disk},if=virtio,format=raw,readonly=on" in argv


def test_prune_keeps_a_kernels_saved_machine_until_its_kernel_goes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path))
    image = _cached_image(tmp_path)
    kernel = entry(tmp_path / "kernels", "1111111111111111")
    gone = entry(tmp_path / "elsewhere", "3333333333333333")  # not in the kernel cache
    root = tmp_path / "saved"
    shape = dataclasses.asdict(SHAPE)
    keep = _write_saved(root / f"trixie-aaaa-{saved.saved_key(image, SHAPE, kernel)}",
                        shape=shape, kernel=kernel.path.name)
    kernel_gone = _write_saved(root / f"trixie-aaaa-{saved.saved_key(image, SHAPE, gone)}",
                               shape=shape, kernel=gone.path.name)
    removed = saved.prune(root)
    assert removed == [kernel_gone]
    assert keep.exists()
    # meta.json is data: a kernel named outside the kernel cache is no kernel of its
    planted = _write_saved(
        tmp_path / "saved2" / f"trixie-aaaa-{saved.saved_key(image, SHAPE, kernel)}",
        shape=shape, kernel=f"../kernels/{kernel.path.name}")
    assert saved.prune(planted.parent) == [planted]


def test_make_saved_boots_the_template_on_the_kernel(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The template's initrd is the kernel's (its stage-1 modules), its payload tells
    node-init.sh where the modules disk is, and meta.json names the kernel's entry."""
    kernel = entry(tmp_path / "kernels", "1111111111111111")
    image = _image()
    (kernel.path / f"initrd-{image.path.name}.cpio").write_bytes(b"")
    made: dict[str, object] = {}

    class Stop(Exception):
        pass

    def make_initrd(self: QemuMachine, base: Path, payload: bytes) -> None:
        made["initrd"], made["payload"] = base, payload

    def make_disk(self: QemuMachine, rootfs: Path) -> None:
        pass

    def launch(self: QemuMachine, argv: list[str], *_args: object) -> int:
        made["argv"] = argv
        raise Stop

    monkeypatch.setattr(QemuMachine, "make_initrd", make_initrd)
    monkeypatch.setattr(QemuMachine, "make_disk", make_disk)
    monkeypatch.setattr(QemuMachine, "launch", launch)
    monkeypatch.setattr(saved.labnet, "create_netns", lambda *a, **k: None)
    monkeypatch.setattr(saved.labnet, "delete_netns", lambda *a, **k: None)
    monkeypatch.setattr(saved.labnet, "add_bridge", lambda *a, **k: None)
    work = tmp_path / "saved" / ".make-x"
    work.mkdir(parents=True)
    with pytest.raises(Stop):
        saved.make_saved(tmp_path / "saved" / "trixie-aaaa-k", work, "k", image, SHAPE,
                         lambda _m: None, kernel)
    assert made["initrd"] == kernel.initrd(image)
    assert b"LABCTL_KERNEL_MODULES" in made["payload"]  # type: ignore[operator]
    argv = made["argv"]
    assert isinstance(argv, list) and argv[argv.index("-kernel") + 1] == str(kernel.boot)


def test_meta_names_the_kernel_entry() -> None:
    """What prune reads back: meta.json's kernel is the entry's name (data, checked)."""
    assert saved.KERNEL_ENTRY_RE.fullmatch(f"{RELEASE}-1111111111111111")
    for bad in ("../../etc", f"{RELEASE}-xyz", "", f"{RELEASE}-1111111111111111/.."):
        assert not saved.KERNEL_ENTRY_RE.fullmatch(bad)
