"""A kernel of the user's own for qemu nodes (the topology's `kernel:` path).

The node image holds modules for its own kernel only. For another kernel labctl makes,
once per kernel (keyed by a hash of its bzImage, configuration and modules, so a rebuilt
bzImage is a new entry) under the cache's `kernels/RELEASE-HASH/`:
- `vmlinux` (the uncompressed kernel, which qemu boots directly when it has a PVH entry)
  or `vmlinuz` (the bzImage as it is);
- `modules.ext4`, a read-only ext4 disk of the kernel's whole `lib/modules/RELEASE`,
  which every node on that kernel shares and node-init.sh mounts at
  /usr/lib/modules/RELEASE (the modules a node loads at boot stored uncompressed and
  unsigned, as in the image, see builder.unsigned_module);
- per image, `initrd-IMAGE.cpio`: the image's stage 1 with this kernel's virtio_blk and
  ext4 modules in place of the image kernel's.

A kernel path is either a build tree after `make` (arch/x86/boot/bzImage, .config, and
the modules that modules.order lists), or a folder as `make modules_install
INSTALL_MOD_PATH=DIR` leaves it (lib/modules/RELEASE, or usr/lib/modules/RELEASE as
Debian's packages have it) plus the kernel: boot/vmlinuz-RELEASE, vmlinuz or bzImage.
"""

from __future__ import annotations

import gzip
import hashlib
import lzma
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from labctl import bounded, hostproc, locks, safefs
from labctl.errors import LabctlError, UsageError
from labctl.images import kconfig
from labctl.images.builder import (
    NODE_MODULES,
    STAGE1_MODULES,
    Image,
    extract_vmlinux,
    unsigned_module,
)
from labctl.images.cpio import CpioWriter, read_entries
from labctl.paths import cache_root
from labctl.progress import Progress
from labctl.topology.kernelsource import DEBIAN_PREFIX
from labctl.topology.resolved import Node

KERNEL_BYTES = 256 << 20  # a bzImage is about 10 MiB; a debug build's, a few times that
CONFIG_BYTES = 4 << 20  # a .config is about 300 KiB
MODULES_BYTES = 8 << 30  # a whole modules directory (allmodconfig with debug info: GiBs)
RELEASE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+~-]{0,63}$")
MODULE_SUFFIXES = (".ko", ".ko.xz", ".ko.zst", ".ko.gz")
# Modules as modules_install places them, and the files depmod reads beside them.
KEPT_FILES = ("modules.order", "modules.builtin", "modules.builtin.modinfo")
TOOL_SECONDS = 600.0  # depmod, mkfs.ext4 of a whole modules tree on a busy host
# The node's disk: /dev/vda is its root, the kernel's modules come right after it.
MODULES_DEVICE = "/dev/vdb"
HOST_TOOLS = {"depmod": "kmod", "modprobe": "kmod", "mkfs.ext4": "e2fsprogs"}
# In every entry's key: a change of what an entry holds makes new entries.
PREPARED_VERSION = "1"


class KernelError(UsageError):
    """A kernel path that cannot serve (exit 2, nothing made)."""


@dataclass(frozen=True)
class KernelFiles:
    """What a kernel path holds."""

    source: Path  # the path the topology names
    kind: str  # "build tree" or "modules folder"
    boot: Path  # the bzImage (or vmlinuz) qemu boots
    release: str  # what `uname -r` says on it
    config: Path  # its .config (config-RELEASE)
    # (path under lib/modules/RELEASE, file)
    modules: tuple[tuple[str, Path], ...] = field(repr=False)


@dataclass(frozen=True)
class PreparedKernel:
    """A kernel made ready for nodes: what qemu boots and the node's modules disk."""

    files: KernelFiles | None  # None: only its cache entry is known (PreparedKernel.at)
    path: Path  # its cache directory, RELEASE-CONTENTHASH
    boot: Path
    modules_disk: Path

    @classmethod
    def at(cls, path: Path) -> PreparedKernel | None:
        """The cache entry `path` as `prepare` left it; None when there is none."""
        if not (path / "modules.ext4").is_file() or path.is_symlink():
            return None
        return cls(None, path, _boot_file(path), path / "modules.ext4")

    @property
    def digest(self) -> str:
        return self.path.name.rsplit("-", 1)[1]

    def initrd(self, image: Image) -> Path:
        return self.path / f"initrd-{image.path.name}.cpio"


def kernel_release(boot: Path) -> str:
    """The release string in a bzImage's boot header (what `uname -r` says on it);
    KernelError when `boot` is not an x86 bzImage."""
    try:
        size = boot.stat().st_size
        with boot.open("rb") as file:
            head = file.read(0x210)
            if size > KERNEL_BYTES or len(head) < 0x210 or head[0x202:0x206] != b"HdrS":
                raise KernelError(f"{boot} is not a Linux kernel (no x86 bzImage boot "
                                  "header)", hint="give the arch/x86/boot/bzImage a "
                                  "`make` built, or Debian's /boot/vmlinuz-RELEASE")
            offset = int.from_bytes(head[0x20E:0x210], "little") + 0x200
            file.seek(offset)
            text = file.read(256)
    except OSError as exc:
        raise KernelError(f"cannot read the kernel {boot}: {exc.strerror or exc}",
                          hint="give a readable bzImage") from None
    release = text.split(b" ", 1)[0].decode(errors="replace")
    if not RELEASE_RE.fullmatch(release):
        raise KernelError(f"{boot}: its boot header names no kernel release",
                          hint="give a bzImage built by the kernel's own `make`")
    return release


def find_kernel(source: Path) -> KernelFiles:
    """What the kernel path `source` holds; KernelError (exit 2) naming what is missing."""
    if (source / "arch/x86/boot/bzImage").is_file() and (source / "Makefile").is_file():
        return _build_tree(source)
    return _modules_folder(source)


def _build_tree(tree: Path) -> KernelFiles:
    boot = tree / "arch/x86/boot/bzImage"
    release = kernel_release(boot)
    config = tree / ".config"
    if not config.is_file():
        raise KernelError(f"the kernel tree {tree} has no .config",
                          hint="configure and build it: `make defconfig`, "
                          f"`labctl kernel config {tree}`, `make -j$(nproc)`")
    modules: list[tuple[str, Path]] = []
    order = tree / "modules.order"
    if order.is_file():  # none: CONFIG_MODULES=n, everything is built in
        for line in read_kernel_text(order).splitlines():
            rel = line.strip()
            if not rel:
                continue
            if rel.endswith(".o"):  # 6.2 and later list the objects
                rel = rel[:-2] + ".ko"
            path = tree / rel
            # the tree's own files only: a link could hand the node any file of the host
            if ".." in Path(rel).parts or not _regular(path):
                raise KernelError(f"the kernel tree {tree}: modules.order lists {rel}, which "
                                  "is not built", hint=f"`make -C {tree} modules`")
            modules.append((f"kernel/{rel}", path))
        modules += [(name, tree / name) for name in KEPT_FILES if (tree / name).is_file()]
    return KernelFiles(tree, "build tree", boot, release, config, tuple(modules))


def _modules_folder(folder: Path) -> KernelFiles:
    found = [d for base in ("lib/modules", "usr/lib/modules") if (folder / base).is_dir()
             for d in sorted((folder / base).iterdir()) if d.is_dir() and not d.is_symlink()]
    if not found:
        raise KernelError(
            f"{folder} is neither a kernel build tree (arch/x86/boot/bzImage) nor a folder "
            "with lib/modules/RELEASE",
            hint="give the tree you ran `make` in, or run `make modules_install "
            "INSTALL_MOD_PATH=DIR` and copy the bzImage into DIR")
    if len(found) > 1:
        raise KernelError(f"{folder} holds the modules of {len(found)} kernels: "
                          f"{', '.join(d.name for d in found)}",
                          hint="give a folder with one kernel's modules")
    moddir = found[0]
    release = moddir.name
    candidates = [folder / "boot" / f"vmlinuz-{release}", folder / f"vmlinuz-{release}",
                  folder / "bzImage", folder / "vmlinuz", folder / "arch/x86/boot/bzImage"]
    boot = next((c for c in candidates if c.is_file()), None)
    if boot is None:
        raise KernelError(f"{folder} has the modules of {release} but no kernel",
                          hint=f"copy the kernel there: cp arch/x86/boot/bzImage {folder}/")
    booted = kernel_release(boot)
    if booted != release:
        raise KernelError(f"{boot} is kernel {booted}, but the modules in {folder} are "
                          f"{release}'s", hint="give the kernel and the modules of one build")
    configs = [folder / "boot" / f"config-{release}", moddir / "config", folder / ".config"]
    config = next((c for c in configs if c.is_file()), None)
    if config is None:
        raise KernelError(f"{folder} has no configuration of {release} (boot/config-{release})",
                          hint=f"copy the tree's .config to {folder}/boot/config-{release}")
    modules = [(str(path.relative_to(moddir)), path) for path in _walk(moddir)
               if path.name.endswith(MODULE_SUFFIXES) or path.name in KEPT_FILES]
    return KernelFiles(folder, "modules folder", boot, release, config, tuple(modules))


def _regular(path: Path) -> bool:
    """A regular file, not a link to one."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def _walk(root: Path) -> Iterator[Path]:
    """Regular files below `root`, sorted, links not followed (a tree's `build` and
    `source` links point back into the tree)."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if stat.S_ISREG(path.lstat().st_mode):
                yield path


def read_kernel_text(path: Path, limit: int = CONFIG_BYTES) -> str:
    """A kernel's text file (.config, config-RELEASE, modules.order), as text."""
    return read_kernel_file(path, limit).decode(errors="replace")


def read_kernel_file(path: Path, limit: int = CONFIG_BYTES) -> bytes:
    """A kernel's file read bounded in size and time (bounded.read_regular: a FIFO there
    does not block); KernelError (exit 2) when it is too large or not a regular file."""
    try:
        size = path.stat().st_size
        if size > limit:
            raise KernelError(f"{path} is larger than {limit >> 20} MiB",
                              hint="give the kernel's own file")
        return bounded.read_regular(path, limit, follow_symlinks=True)
    except bounded.BoundedError as exc:
        raise KernelError(str(exc), hint="give the kernel's own file") from None


def read_config(files: KernelFiles) -> str:
    return read_kernel_text(files.config)


def content_digest(files: KernelFiles) -> str:
    """A hash of everything a node gets of the kernel: a rebuilt bzImage, another
    configuration or one changed module is another kernel."""
    digest = hashlib.sha256(PREPARED_VERSION.encode() + b"\0")
    total = 0
    for name, path in (("boot", files.boot), ("config", files.config), *files.modules):
        digest.update(name.encode() + b"\0")
        with path.open("rb") as file:
            while chunk := file.read(1 << 20):
                total += len(chunk)
                if total > MODULES_BYTES:
                    raise KernelError(f"the kernel {files.source} is larger than "
                                      f"{MODULES_BYTES >> 30} GiB with its modules",
                                      hint="build without debug info "
                                      "(scripts/config --disable DEBUG_INFO)")
                digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def kernels_root() -> Path:
    return cache_root() / "kernels"


def prepare(files: KernelFiles, image: Image, progress: Progress) -> PreparedKernel:
    """The kernel ready to boot nodes of `image`: made once per kernel (and its initrd
    once per image), under a lock so that concurrent `up`s wait for the first."""
    _check_host_tools()
    digest = content_digest(files)
    path = kernels_root() / f"{files.release}-{digest}"
    cache_root().mkdir(parents=True, exist_ok=True)  # the user's choice: may be a link
    safefs.make_dirs(kernels_root(), cache_root())  # a link or file below it is refused
    with locks.blocking_lock(kernels_root() / f".{path.name}.lock"):
        if not (path / "modules.ext4").is_file():
            progress(f"kernel {files.release}: preparing its modules disk (once)")
            _make(files, path)
        prepared = PreparedKernel(files, path, _boot_file(path), path / "modules.ext4")
        initrd = prepared.initrd(image)
        if not initrd.is_file():
            _write_initrd(prepared, image, initrd)
    return prepared


def _check_host_tools() -> None:
    for tool, package in HOST_TOOLS.items():
        if shutil.which(tool) is None:
            raise LabctlError(f"{tool} is not installed (a node on a kernel of your own "
                              "needs it)", hint=f"apt-get install {package}")


def _boot_file(path: Path) -> Path:
    return path / "vmlinux" if (path / "vmlinux").is_file() else path / "vmlinuz"


def _make(files: KernelFiles, path: Path) -> None:
    """The cache entry, made beside its place and renamed into it in one step."""
    work = Path(tempfile.mkdtemp(prefix=".new-", dir=kernels_root()))
    try:
        moddir = work / "stage/lib/modules" / files.release
        for rel, source in files.modules:
            target = moddir / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        moddir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(files.config, moddir / "config")
        stage = work / "stage"
        _depmod(stage, files.release)
        boot_modules = (*STAGE1_MODULES, *NODE_MODULES, "siw", "tcp_diag", "virtio_balloon")
        for rel in _show_depends(stage, files.release, boot_modules):
            _uncompress(moddir / rel)
        _depmod(stage, files.release)
        # stage 1's modules (uncompressed above), in load order
        stage1 = work / "stage1"
        stage1.mkdir()
        names = []
        for rel in _show_depends(stage, files.release, STAGE1_MODULES):
            names.append(rel.rsplit("/", 1)[-1])
            shutil.copyfile(moddir / rel, stage1 / names[-1])
        (stage1 / "order").write_text("".join(f"{n}\n" for n in names))
        if not extract_vmlinux(files.boot, work / "vmlinux"):
            shutil.copyfile(files.boot, work / "vmlinuz")
        _make_ext4(moddir, work / "modules.ext4")
        shutil.rmtree(work / "stage")
        os.rename(work, path)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _depmod(base: Path, release: str) -> None:
    hostproc.run(["depmod", "-b", str(base), release], timeout=TOOL_SECONDS,
                 what=f"depmod (the modules of {release})", missing_hint="apt-get install kmod")


def _show_depends(base: Path, release: str, modules: tuple[str, ...]) -> list[str]:
    """The files (under lib/modules/RELEASE) of `modules` and of what they need, soft
    dependencies included, in load order, as modprobe would load them; built-in ones and
    modules this kernel does not have are left out."""
    moddir = base / "lib/modules" / release
    ordered: list[str] = []
    for module in modules:
        out = hostproc.run(["modprobe", "-d", str(base), "-S", release, "--show-depends",
                            module], timeout=TOOL_SECONDS, check=False,
                           what=f"modprobe --show-depends {module}",
                           missing_hint="apt-get install kmod").stdout
        for line in out.splitlines():
            if line.startswith("insmod "):
                rel = str(Path(line.split()[1]).relative_to(moddir))
                if rel not in ordered:
                    ordered.append(rel)
    return ordered


def _uncompress(path: Path) -> None:
    """The module stored uncompressed and unsigned under its .ko name."""
    data = path.read_bytes()
    if path.name.endswith(".ko.xz"):
        data = lzma.decompress(data)
    elif path.name.endswith(".ko.zst"):
        data = hostproc.run_bytes(["zstd", "-dcq"], input=data, timeout=TOOL_SECONDS,
                                  limit=KERNEL_BYTES)
    elif path.name.endswith(".ko.gz"):
        data = gzip.decompress(data)
    path.unlink()
    path.with_name(path.name.split(".ko")[0] + ".ko").write_bytes(unsigned_module(data))


def _make_ext4(moddir: Path, target: Path) -> None:
    used = sum(p.stat().st_size for p in _walk(moddir))
    size_mib = used * 5 // 4 // (1 << 20) + 16  # room for the file system's own blocks
    hostproc.run(["mkfs.ext4", "-q", "-F", "-L", "labctl-modules", "-m", "0",
                  "-O", "^has_journal", "-E", "root_owner=0:0", "-d", str(moddir),
                  str(target), f"{size_mib}M"], timeout=TOOL_SECONDS,
                 what="mkfs.ext4 (the kernel's modules disk)",
                 missing_hint="apt-get install e2fsprogs")


def _write_initrd(kernel: PreparedKernel, image: Image, target: Path) -> None:
    """The image's stage 1 with this kernel's virtio_blk and ext4 (and what they need) in
    place of the image kernel's; none when the kernel has them built in."""
    archive = CpioWriter()
    for name, mode, data in read_entries(image.initrd.read_bytes()):
        if name == "modules" or name.startswith("modules/"):
            continue
        if stat.S_ISDIR(mode):
            archive.directory(name, mode & 0o7777)
        elif stat.S_ISLNK(mode):
            archive.symlink(name, data.decode())
        else:
            archive.file(name, data, mode & 0o7777)
    archive.directory("modules")
    stage1 = kernel.path / "stage1"
    names = (stage1 / "order").read_text().split()
    for name in names:
        archive.file(f"modules/{name}", (stage1 / name).read_bytes())
    archive.file("modules/order", "".join(f"{n}\n" for n in names).encode())
    partial = target.with_name(f".{target.name}.new")
    partial.write_bytes(archive.render())
    os.rename(partial, target)


def check_kernels(nodes: Iterable[Node]) -> dict[str, KernelFiles]:
    """Each own kernel the nodes boot (by its path), read and checked against what the
    nodes on it need: one KernelError (exit 2, before anything is made) listing every
    option a kernel lacks, with the line that adds it. Faults' options are only noted."""
    by_path: dict[str, list[Node]] = {}
    for node in nodes:
        # A debian:VERSION kernel not fetched yet (`validate`) has Debian's configuration,
        # read when `up` has fetched it into a folder (then it is a path like any other).
        if node.kernel_path is not None and not node.kernel.startswith(DEBIAN_PREFIX):
            by_path.setdefault(node.kernel_path, []).append(node)
    found = {}
    problems: list[str] = []
    fixes: list[kconfig.Option] = []
    for path, users in by_path.items():
        files = find_kernel(Path(path))
        found[path] = files
        config = kconfig.parse(read_config(files))
        lacking = kconfig.missing(config, kconfig.needed(users))
        if lacking:
            names = ", ".join(n.name for n in users)
            problems.append(f"kernel {path} ({files.release}, nodes {names}) lacks:")
            problems += kconfig.problem_lines(lacking)
            fixes += [o for o in lacking if o not in fixes]
    if problems:
        tree = next(iter(by_path)) if len(by_path) == 1 else "TREE"
        raise KernelError(
            "\n".join(problems),
            hint=f"in the kernel tree: `{kconfig.fix_line(fixes)}`, then build it again; "
            f"or `labctl kernel config {tree}` adds every option labctl uses")
    return found


def fault_notes(files: KernelFiles) -> list[str]:
    """What `labctl fault` and link delay/loss will lack on this kernel (not required)."""
    config = kconfig.parse(read_config(files))
    return [f"kernel {files.release} lacks CONFIG_{o.name} ({o.why}): {o.fix}"
            for o in kconfig.missing(config, kconfig.FAULTS)]
