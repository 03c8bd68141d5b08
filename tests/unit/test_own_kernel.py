"""A kernel of the user's own for qemu nodes: what a kernel path must hold
(labctl.images.kernels), the .config check against what the nodes need (labctl.images.kconfig,
on Debian's real config-6.12.117+deb13-amd64), the key of a prepared kernel, `up --kernel`'s
refusals, the node's status reply, and the plan of a node on its own kernel (golden)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

from labctl.errors import UsageError
from labctl.images import kconfig
from labctl.images.builder import Image
from labctl.images.cpio import CpioWriter, read_entries
from labctl.images.kernels import (
    KernelError,
    PreparedKernel,
    check_kernels,
    content_digest,
    find_kernel,
    kernel_release,
)
from labctl.node.replies import status_reply
from labctl.providers.qemu import plan_lab
from labctl.topology.kernelsource import with_kernel
from labctl.topology.load import load_lab
from labctl.topology.resolved import Lab, Mount
from tests.unit.clirun import run_main

HERE = Path(__file__).parent
REPO = HERE.parents[1]
DEBIAN_CONFIG = HERE / "data" / "config-6.12.117+deb13-amd64"
RELEASE = "6.12.117+deb13-amd64"
GOLDEN = HERE / "golden" / "qemu-plan-two-node-own-kernel-tcg.json"


def bzimage(release: str) -> bytes:
    """The head of an x86 bzImage as the boot protocol lays it out: "HdrS" at 0x202 and, at
    0x20E, the offset (from 0x200) of the kernel's version string."""
    data = bytearray(0x400)
    data[0x202:0x206] = b"HdrS"
    data[0x20E:0x210] = (0x300 - 0x200).to_bytes(2, "little")
    text = f"{release} (debian-kernel@lists.debian.org) #1 SMP PREEMPT_DYNAMIC\0".encode()
    data[0x300:0x300 + len(text)] = text
    return bytes(data)


def modules_folder(root: Path, release: str = RELEASE, config: str | None = None) -> Path:
    """A folder as `make modules_install INSTALL_MOD_PATH=root` leaves it (Debian's
    usr/lib/modules layout) plus boot/vmlinuz-RELEASE and boot/config-RELEASE."""
    moddir = root / "usr/lib/modules" / release
    (moddir / "kernel/drivers/infiniband/sw/rxe").mkdir(parents=True)
    (moddir / "kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko.xz").write_bytes(b"rxe")
    (moddir / "modules.order").write_text("kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko\n")
    (root / "boot").mkdir()
    (root / "boot" / f"vmlinuz-{release}").write_bytes(bzimage(release))
    (root / "boot" / f"config-{release}").write_text(
        DEBIAN_CONFIG.read_text() if config is None else config)
    return root


def build_tree(root: Path, config: str) -> Path:
    """A kernel tree after `make`: Makefile, .config, arch/x86/boot/bzImage, and the
    modules modules.order lists (as objects, as 6.2 and later write it)."""
    (root / "arch/x86/boot").mkdir(parents=True)
    (root / "arch/x86/boot/bzImage").write_bytes(bzimage("6.19.0-rc1+"))
    (root / "Makefile").write_text("VERSION = 6\n")
    (root / ".config").write_text(config)
    (root / "drivers/infiniband/sw/rxe").mkdir(parents=True)
    (root / "drivers/infiniband/sw/rxe/rdma_rxe.ko").write_bytes(b"rxe")
    (root / "modules.order").write_text("drivers/infiniband/sw/rxe/rdma_rxe.o\n")
    (root / "modules.builtin").write_text("kernel/fs/ext4/ext4.ko\n")
    return root


def lab_on(kernel: Path, topology: str = "two-node.yaml") -> Lab:
    return with_kernel(load_lab(REPO / "topologies" / topology), str(kernel), Path.cwd())


# --- the kernel's .config -------------------------------------------------------------
def test_debian_config_serves_rxe_but_lacks_siw() -> None:
    config = kconfig.parse(DEBIAN_CONFIG.read_text())
    assert config["RDMA_RXE"] == "m" and config["VIRTIO_BLK"] == "m"
    assert "RDMA_SIW" not in config  # "# CONFIG_RDMA_SIW is not set"
    lab = load_lab(REPO / "topologies" / "two-node.yaml")
    assert kconfig.missing(config, kconfig.needed(lab.nodes)) == []
    siw = load_lab(REPO / "topologies" / "siw-pair.yaml")
    assert [o.name for o in kconfig.missing(config, kconfig.needed(siw.nodes))] == ["RDMA_SIW"]
    assert kconfig.missing(config, kconfig.FAULTS) == []


def test_mounts_need_9p() -> None:
    lab = load_lab(REPO / "topologies" / "two-node.yaml")
    mounted = dataclasses.replace(lab.nodes[0], mounts=(Mount("/src", "/work"),))
    names = {o.name for o in kconfig.needed([mounted])}
    assert {"NET_9P", "NET_9P_VIRTIO", "9P_FS"} <= names
    assert not {"NET_9P", "9P_FS"} & {o.name for o in kconfig.needed(lab.nodes)}


def test_a_kernel_without_rxe_is_refused_with_the_lines_that_fix_it(tmp_path: Path) -> None:
    text = DEBIAN_CONFIG.read_text().replace("CONFIG_RDMA_RXE=m",
                                             "# CONFIG_RDMA_RXE is not set")
    text = text.replace("CONFIG_INFINIBAND_USER_ACCESS=m",
                        "# CONFIG_INFINIBAND_USER_ACCESS is not set")
    folder = modules_folder(tmp_path / "k", config=text)
    with pytest.raises(KernelError) as info:
        check_kernels(lab_on(folder).nodes)
    assert info.value.message == (
        f"kernel {folder} ({RELEASE}, nodes node1, node2) lacks:\n"
        "  CONFIG_INFINIBAND_USER_ACCESS (ibv_* programs and the inspector "
        "(/dev/infiniband)): scripts/config --module INFINIBAND_USER_ACCESS\n"
        "  CONFIG_RDMA_RXE (rdma: rxe (Soft-RoCE)): scripts/config --module RDMA_RXE")
    assert info.value.hint == (
        "in the kernel tree: `scripts/config --file .config --module INFINIBAND_USER_ACCESS "
        "--module RDMA_RXE && make olddefconfig`, then build it again; or `labctl kernel "
        f"config {folder}` adds every option labctl uses")


def test_kernel_config_never_writes_through_a_link_in_a_tree_from_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """labctl runs as root: `.config.old` planted as a link to a file outside the tree is
    replaced, and the file it named is left as it was."""
    tree = build_tree(tmp_path / "linux", DEBIAN_CONFIG.read_text())
    outside = tmp_path / "outside"
    outside.write_text("not yours\n")
    (tree / ".config.old").symlink_to(outside)
    code, _, _ = run_main(monkeypatch, capsys, "kernel", "config", str(tree))
    assert code == 0
    assert outside.read_text() == "not yours\n"
    assert not (tree / ".config.old").is_symlink()
    assert (tree / ".config.old").read_text() == DEBIAN_CONFIG.read_text()


def test_a_kernel_file_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    import os

    from labctl.images.kernels import KernelError, read_kernel_text

    os.mkfifo(tmp_path / "config")
    with pytest.raises(KernelError) as caught:
        read_kernel_text(tmp_path / "config")
    expected = f"{tmp_path / 'config'} is a named pipe (FIFO), not a regular file"
    assert caught.value.message == expected


def test_kernel_config_sets_what_is_missing_once() -> None:
    text = DEBIAN_CONFIG.read_text()
    changed_text, changed = kconfig.enable(text, kconfig.ALL)
    assert [o.name for o in changed] == ["RDMA_SIW"]
    assert "CONFIG_RDMA_SIW=m" in changed_text.splitlines()
    assert "# CONFIG_RDMA_SIW is not set" not in changed_text
    assert kconfig.enable(changed_text, kconfig.ALL) == (changed_text, [])
    bool_off = text.replace("CONFIG_DEVTMPFS=y", "# CONFIG_DEVTMPFS is not set")
    assert "CONFIG_DEVTMPFS=y" in kconfig.enable(bool_off, kconfig.ALL)[0].splitlines()


def test_labctl_kernel_config_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    tree = build_tree(tmp_path / "linux", DEBIAN_CONFIG.read_text())
    code, out, _ = run_main(monkeypatch, capsys, "kernel", "config", str(tree))
    assert code == 0
    assert "CONFIG_RDMA_SIW=m  (rdma: siw (soft-iWARP))" in out
    assert "CONFIG_RDMA_SIW=m" in (tree / ".config").read_text().splitlines()
    assert (tree / ".config.old").read_text() == DEBIAN_CONFIG.read_text()
    code, out, _ = run_main(monkeypatch, capsys, "kernel", "config", str(tree))
    assert (code, out.strip()) == (0, f"{tree}/.config: every option labctl uses is set "
                                   "already")
    code, _, err = run_main(monkeypatch, capsys, "kernel", "config", str(tmp_path / "none"))
    assert code == 2
    assert "is not a configured kernel tree (no Makefile and .config)" in err
    assert "hint: configure it first" in err


# --- what a kernel path holds ---------------------------------------------------------
def test_modules_folder_is_found(tmp_path: Path) -> None:
    folder = modules_folder(tmp_path / "k")
    files = find_kernel(folder)
    assert (files.kind, files.release) == ("modules folder", RELEASE)
    assert files.boot == folder / "boot" / f"vmlinuz-{RELEASE}"
    assert files.config == folder / "boot" / f"config-{RELEASE}"
    assert [rel for rel, _ in files.modules] == [
        "modules.order", "kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko.xz"]


def test_build_tree_is_found_with_the_modules_its_order_lists(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "linux", DEBIAN_CONFIG.read_text())
    files = find_kernel(tree)
    assert (files.kind, files.release, files.config) == ("build tree", "6.19.0-rc1+",
                                                         tree / ".config")
    assert [rel for rel, _ in files.modules] == [
        "kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko", "modules.order", "modules.builtin"]
    (tree / "drivers/infiniband/sw/rxe/rdma_rxe.ko").unlink()
    (tree / "drivers/infiniband/sw/rxe/rdma_rxe.ko").symlink_to("/etc/shadow")
    with pytest.raises(KernelError, match=re.escape("which is not built")):
        find_kernel(tree)  # a link is not the tree's own module
    (tree / "drivers/infiniband/sw/rxe/rdma_rxe.ko").unlink()
    with pytest.raises(KernelError, match=re.escape(
            "modules.order lists drivers/infiniband/sw/rxe/rdma_rxe.ko, which is not built")):
        find_kernel(tree)


@pytest.mark.parametrize(("damage", "message"), [
    (lambda f: (f / "boot" / f"vmlinuz-{RELEASE}").write_bytes(b"\x7fELF" + bytes(0x300)),
     r"is not a Linux kernel \(no x86 bzImage boot header\)"),
    (lambda f: (f / "boot" / f"vmlinuz-{RELEASE}").write_bytes(bzimage("6.1.0-9-amd64")),
     f"is kernel 6.1.0-9-amd64, but the modules in .* are {re.escape(RELEASE)}'s"),
    (lambda f: (f / "boot" / f"vmlinuz-{RELEASE}").unlink(),
     f"has the modules of {re.escape(RELEASE)} but no kernel"),
    (lambda f: (f / "boot" / f"config-{RELEASE}").unlink(),
     f"has no configuration of {re.escape(RELEASE)}"),
    (lambda f: (f / "usr/lib/modules/6.1.0-9-amd64").mkdir(),
     "holds the modules of 2 kernels"),
], ids=["not-a-kernel", "other-release", "no-kernel", "no-config", "two-releases"])
def test_a_kernel_folder_that_cannot_serve_is_refused(tmp_path: Path, damage: object,
                                                      message: str) -> None:
    folder = modules_folder(tmp_path / "k")
    damage(folder)  # type: ignore[operator]
    with pytest.raises(KernelError, match=message) as info:
        find_kernel(folder)
    assert info.value.hint


def test_a_folder_without_modules_is_neither(tmp_path: Path) -> None:
    with pytest.raises(KernelError, match="is neither a kernel build tree"):
        find_kernel(tmp_path)


def test_kernel_release_reads_the_boot_header(tmp_path: Path) -> None:
    boot = tmp_path / "bzImage"
    boot.write_bytes(bzimage("6.19.0-rc1-00042-gdeadbeef"))
    assert kernel_release(boot) == "6.19.0-rc1-00042-gdeadbeef"
    boot.write_bytes(bzimage("$(reboot)"))
    with pytest.raises(KernelError, match="names no kernel release"):
        kernel_release(boot)


def test_a_rebuilt_bzimage_is_another_kernel(tmp_path: Path) -> None:
    """The prepared kernel's key (and so its cache entry) is a hash of what the node gets."""
    folder = modules_folder(tmp_path / "k")
    first = content_digest(find_kernel(folder))
    assert content_digest(find_kernel(folder)) == first
    boot = folder / "boot" / f"vmlinuz-{RELEASE}"
    boot.write_bytes(boot.read_bytes() + b"rebuilt")
    rebuilt = content_digest(find_kernel(folder))
    assert rebuilt != first
    (folder / "usr/lib/modules" / RELEASE / "modules.order").write_text("changed\n")
    assert content_digest(find_kernel(folder)) not in (first, rebuilt)


# --- up --kernel and the topology ------------------------------------------------------
def test_up_kernel_resolves_from_the_working_directory(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    folder = modules_folder(tmp_path / "k")
    monkeypatch.chdir(tmp_path)
    lab = with_kernel(load_lab(REPO / "topologies" / "two-node.yaml"), "k", tmp_path)
    assert {n.kernel for n in lab.nodes} == {str(folder)}
    with pytest.raises(UsageError) as info:
        with_kernel(lab, "missing", tmp_path)
    assert info.value.message == "--kernel 'missing': the kernel 'missing' does not exist"


def test_lab_json_keeps_no_kernel_key_for_the_images_kernel(tmp_path: Path) -> None:
    lab = load_lab(REPO / "topologies" / "two-node.yaml")
    assert '"kernel"' not in lab.to_json()
    own = lab_on(modules_folder(tmp_path / "k"))
    assert type(own).from_json(own.to_json()) == own
    assert json.loads(own.to_json())["nodes"][0]["kernel"] == str(tmp_path / "k")


# --- the node's status reply ------------------------------------------------------------
def test_status_reply_carries_the_release_checked() -> None:
    reply = status_reply({"devices": [], "interfaces": [], "kernel": RELEASE})
    assert reply["kernel"] == RELEASE
    assert status_reply({"devices": []})["kernel"] is None  # an older node
    for bad in ("x" * 65, "6.12 ; reboot", 612, ""):
        with pytest.raises(ValueError, match="not a kernel release"):
            status_reply({"devices": [], "kernel": bad})


# --- the initrd and the plan ------------------------------------------------------------
def test_cpio_entries_read_back() -> None:
    archive = CpioWriter()
    archive.file("bin/busybox", b"\x7fELF", 0o755)
    archive.symlink("devlinks/fd", "/proc/self/fd")
    names = [(n, m & 0o777, d) for n, m, d in read_entries(archive.render())]
    assert names == [("bin", 0o755, b""), ("bin/busybox", 0o755, b"\x7fELF"),
                     ("devlinks", 0o755, b""), ("devlinks/fd", 0o777, b"/proc/self/fd")]
    with pytest.raises(ValueError, match="no cpio newc header"):
        read_entries(b"not an archive")


def test_plan_of_nodes_on_their_own_kernel_matches_golden(tmp_path: Path) -> None:
    """Each node boots the prepared kernel and gets its modules disk, read-only, right
    after its root disk, and LABCTL_KERNEL_MODULES names it; the rest is the image's plan
    (tests/unit/test_qemu_plan.py: the image's own kernel's plans are unchanged)."""
    folder = modules_folder(tmp_path / "k")
    lab = lab_on(folder)
    lab = dataclasses.replace(lab, nodes=tuple(
        dataclasses.replace(n, kernel="/src/linux") for n in lab.nodes))
    image = Image(Path("/cache/img"), Path("/cache/img/vmlinuz"),
                  Path("/cache/img/initrd.cpio"), Path("/cache/img/root.ext4"), {})
    entry = Path("/cache/kernels/6.19.0-rc1+-0123456789abcdef")
    kernel = PreparedKernel(find_kernel(folder), entry, entry / "vmlinux",
                            entry / "modules.ext4")
    node_dirs = {n.name: Path("/labs") / lab.name / "nodes" / n.name for n in lab.nodes}
    ports = {n.name: 40000 + n.index for n in lab.nodes}
    plan = plan_lab(lab, node_dirs, {"trixie": image}, "tcg", ports, None,
                    {"/src/linux": kernel})
    actual = json.dumps(dataclasses.asdict(plan), indent=2, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(actual)
    assert actual == GOLDEN.read_text()
    argv = plan.nodes[0].argv
    assert argv[argv.index("-kernel") + 1] == str(entry / "vmlinux")
    drives = [argv[i + 1] for i, word in enumerate(argv) if word == "-drive"]
    assert drives[1] == f"file={entry}/modules.ext4,if=virtio,format=raw,readonly=on"
    assert plan.nodes[0].env["LABCTL_KERNEL_MODULES"] == "/dev/vdb"


def test_status_table_names_the_release_and_its_source() -> None:
    from labctl.cli.status import _kernel_words

    assert _kernel_words({"source": "image", "release": "7.3.4+deb13-amd64"}) == (
        "7.3.4+deb13-amd64 (image)")
    assert _kernel_words({"source": "/src/linux", "release": "6.19.0-rc1+"}) == (
        "6.19.0-rc1+ (own: linux)")
    assert _kernel_words({"source": "provider", "release": None}) == "- (provider)"
    from labctl.images.debian_kernels import debian_root

    debian = str(debian_root() / "6.12.118+deb13-amd64_1%6.12.118-1")  # an epoch's ':'
    assert _kernel_words({"source": debian, "release": "6.12.118+deb13-amd64"}) == (
        "6.12.118+deb13-amd64 (debian: 1:6.12.118-1)")
    debian = str(debian_root() / "6.12.118+deb13-amd64_6.12.118-1")
    assert _kernel_words({"source": debian, "release": "6.12.118+deb13-amd64"}) == (
        "6.12.118+deb13-amd64 (debian: 6.12.118-1)")
    assert _kernel_words({"source": "/src/kernels/debian/linux_x", "release": None}) == (
        "- (own: linux_x)")  # a folder of the user's called debian is not the cache


def test_status_names_a_shared_kernel_once_and_differing_ones_per_node() -> None:
    from labctl.cli.status import _shared_kernel

    image = {"source": "image", "release": "7.3.4+deb13-amd64"}
    silent = {"source": "image", "release": None}
    own = {"source": "/src/linux", "release": "6.19.0-rc1+"}
    assert _shared_kernel([image, image]) == image
    assert _shared_kernel([image, silent]) == image  # a node that did not answer
    assert _shared_kernel([silent, silent]) == silent
    assert _shared_kernel([image, own]) is None
    assert _shared_kernel([own, {**own, "release": "6.19.0-rc2+"}]) is None


def test_validate_checks_the_kernels_config_as_up_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`validate` of a topology on a tree without RDMA_RXE: exit 2 with each option it lacks
    and the line that adds it, before any lab (the check `up` makes first); the same tree
    with the option passes."""
    text = DEBIAN_CONFIG.read_text().replace("CONFIG_RDMA_RXE=m", "# CONFIG_RDMA_RXE is not set")
    folder = modules_folder(tmp_path / "k", config=text)
    topology = tmp_path / "lab.yaml"
    topology.write_text(f"name: kv\ndefaults: {{rdma: rxe, kernel: {folder}}}\n"
                        "nodes: {node1: {}, node2: {}}\n"
                        "links: [{endpoints: [node1:eth1, node2:eth1]}]\n")
    code, out, err = run_main(monkeypatch, capsys, "validate", str(topology))
    assert code == 2 and out == ""
    assert err.startswith(f"error: kernel {folder} ({RELEASE}, nodes node1, node2) lacks:\n"
                          "  CONFIG_RDMA_RXE (rdma: rxe (Soft-RoCE)): "
                          "scripts/config --module RDMA_RXE\nhint: in the kernel tree: "), err
    good = modules_folder(tmp_path / "k2")
    topology.write_text(topology.read_text().replace(str(folder), str(good)))
    code, out, err = run_main(monkeypatch, capsys, "validate", str(topology))
    assert code == 0 and out.startswith("lab kv:"), err
    # a Debian kernel is not fetched by validate: its configuration is read by up
    topology.write_text(topology.read_text().replace(str(good), '"debian:6.12"'))
    code, out, err = run_main(monkeypatch, capsys, "validate", str(topology))
    assert code == 0 and out.startswith("lab kv:"), err


def test_every_module_node_init_loads_is_an_option_the_check_requires() -> None:
    """node-init.sh stops a qemu node's boot when a module it loads is missing ("fail
    modprobe virtio_rng": seen on a defconfig tree the check had passed); each of them is
    an option every node needs, so the check refuses such a kernel before booting."""
    script = (REPO / "labctl" / "nodeside" / "node-init.sh").read_text()
    listed = re.search(r'^\s*vm\) modules="([^"]+)"', script, re.M)
    assert listed is not None
    loaded = listed[1].split()
    assert sorted(loaded) == sorted(kconfig.NODE_INIT_MODULES)
    base = {o.name for o in kconfig.BASE}
    assert {kconfig.NODE_INIT_MODULES[m] for m in loaded} <= base
