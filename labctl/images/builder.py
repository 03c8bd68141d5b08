"""Builds node images from Debian packages and caches them by a hash of their inputs.

An image directory holds:
  vmlinuz        the kernel as Debian ships it (bzImage)
  vmlinux        the same kernel uncompressed, booted directly through its PVH entry
                 point when it could be extracted (no decompression under emulation)
  initrd.cpio    stage 1: busybox, the virtio_blk/ext4 modules, /dev's links and our init
                 script
  root.ext4      the root filesystem (nodes boot qcow2 overlays on top of it)
  manifest.json  kernel and package versions, sizes, build time
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import lzma
import os
import shlex
import shutil
import stat
import struct
import subprocess
import tempfile
import time
import zlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from labctl import bounded, hostproc, safefs
from labctl.data.recipes import RECIPES, Recipe, check_mirror
from labctl.errors import LabctlError
from labctl.images.cpio import CpioWriter
from labctl.paths import cache_root
from labctl.progress import Progress

BUILDER_VERSION = "4"  # 4: boot modules stored without their signatures
# Modules stage 1 needs to mount the root disk (their dependencies are resolved by modprobe).
STAGE1_MODULES = ("virtio_blk", "ext4")
# Modules every node loads at boot: stored uncompressed, since decompressing them under
# emulation costs about a second per node.
NODE_MODULES = ("virtio_net", "virtio_rng", "ib_uverbs", "rdma_ucm", "rdma_rxe", "ib_umad",
                "sch_netem", "9pnet_virtio", "9p",  # 9p: nodes with host folders
                "loop")  # /dev/loop-control and /dev/loop0-7, as on any Debian machine
# The links udev (systemd) makes in /dev of a Debian machine. A node's /dev is the kernel's
# devtmpfs, which has none of them: stage 1 copies these in (one program; each costs a cold
# TCG boot tens of milliseconds) and drops /dev/core when the kernel has no /proc/kcore.
# Without /dev/fd bash's process substitution `<(...)` fails.
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
             ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"),
             ("core", "/proc/kcore"))
# labctl-devinfo and labctl-devices in a node: a compiled client of the inspector's helper.
CLIENT_SOURCE = "verbs-client.c"
HOST_TOOLS = {"mmdebstrap": "mmdebstrap", "mkfs.ext4": "e2fsprogs"}
# Packages in the shared download directory that no build read for this long are dropped.
DEBS_KEEP_DAYS = 14.0


@dataclass(frozen=True)
class Image:
    path: Path
    kernel: Path
    initrd: Path
    rootfs: Path
    manifest: dict

    @classmethod
    def at(cls, path: Path) -> Image:
        """The image in cache directory `path`; CorruptImage when its manifest is not one
        labctl wrote (FileNotFoundError or NotADirectoryError when there is none)."""
        if path.is_symlink():
            raise CorruptImage(path, "it is a symbolic link (a cache entry is a directory "
                               "labctl made)")
        manifest = read_manifest(path)
        kernel = path / "vmlinux" if os.path.lexists(path / "vmlinux") else path / "vmlinuz"
        image = cls(path, kernel, path / "initrd.cpio", path / "root.ext4", manifest)
        for file in (image.kernel, image.initrd, image.rootfs):
            _check_own_file(image, file)
        return image


def _check_own_file(image: Image, file: Path) -> None:
    """What qemu opens from the image is a regular file of one name: never a link, nor a
    hard link to a host file (the node would read it)."""
    try:
        info = file.lstat()
    except FileNotFoundError:
        raise CorruptImage(image.path, f"{file.name} is missing") from None
    except OSError as exc:
        raise CorruptImage(image.path, f"{file.name}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise CorruptImage(image.path, f"{file.name} is a link or not a regular file")
    if info.st_nlink != 1:
        raise CorruptImage(image.path, f"{file.name} has {info.st_nlink} hard links")


class CorruptImage(LabctlError):
    """An image directory in the cache whose manifest labctl cannot use."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"image {path.name} in the cache is corrupt: {problem}",
                         hint=f"remove it (rm -r {path}) or rebuild it (labctl image build "
                         "--force)")
        self.path = path
        self.problem = problem


MANIFEST_BYTES = 1 << 20  # a manifest is a few KiB (the package list)
# modprobe, depmod and dpkg-query in the image's root (depmod of a whole kernel's modules
# takes seconds; a busy 2-core host, minutes), and zstd -d of the kernel
CHROOT_SECONDS = 600
VMLINUX_BYTES = 512 << 20  # an uncompressed kernel is tens of MiB
REBUILD_HINT = "see the build log above; `labctl image build --force` builds it again"
# The manifest keys labctl reads, and their types: checked once, when it is read.
_MANIFEST_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "key": (str,), "kernel": (str,), "rdma_core": (str,),
    "rootfs_bytes": (int,), "build_seconds": (int, float),
}


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the image directory `path`, read bounded (a regular file, not a
    link, at most MANIFEST_BYTES, JSON without NaN) with the keys labctl reads checked;
    CorruptImage otherwise. FileNotFoundError and NotADirectoryError pass through: no
    manifest, no image."""
    try:
        manifest = bounded.load_object(bounded.read_regular(path / "manifest.json",
                                                            MANIFEST_BYTES))
    except bounded.BoundedError as exc:
        raise CorruptImage(path, f"manifest.json: {exc}") from None
    except (FileNotFoundError, NotADirectoryError):
        raise  # no manifest (or `path` is a file): not an image at all
    except OSError as exc:
        raise CorruptImage(path, f"manifest.json: {exc.strerror or exc}") from None
    for key, types in _MANIFEST_TYPES.items():
        value = manifest.get(key)
        if isinstance(value, bool) or not isinstance(value, types):
            raise CorruptImage(path, f"manifest.json has no valid {key!r}")
    return manifest


def _resource_text(*parts: str) -> str:
    return resources.files("labctl.images").joinpath(*parts).read_text()


def image_key(recipe: Recipe, mirror: str | None) -> str:
    """Content address of an image: every input that changes what gets built."""
    inputs = {
        "builder": BUILDER_VERSION,
        "recipe": [recipe.suite, recipe.kernel_suite, sorted(recipe.packages)],
        "mirror": mirror or "",
        "hooks": [_resource_text("hooks", h) for h in ("kernel.sh", "build.sh", "trim.sh")],
        "client": _resource_text(CLIENT_SOURCE),
        "init": _resource_text("initramfs-init.sh"),
        "modules": [STAGE1_MODULES, NODE_MODULES],
        "dev_links": DEV_LINKS,
    }
    if recipe.hooks:  # only then: the keys of images without hooks of their own stay
        inputs["recipe_hooks"] = [[h, _resource_text("hooks", h)] for h in recipe.hooks]
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def image_dir(recipe: Recipe, mirror: str | None = None) -> Path:
    return cache_root() / "images" / f"{recipe.name}-{image_key(recipe, mirror)}"


def cached_image(recipe: Recipe, mirror: str | None = None) -> Image | None:
    """The cached image of `recipe`; None when it is missing or corrupt (a build makes it
    anew)."""
    return usable_image(image_dir(recipe, mirror))


def usable_image(path: Path) -> Image | None:
    """The image in `path`, None when there is none or it is corrupt."""
    try:
        return Image.at(path)
    except (FileNotFoundError, NotADirectoryError, CorruptImage):
        return None


def _check_host_tools() -> None:
    missing = [pkg for tool, pkg in HOST_TOOLS.items() if shutil.which(tool) is None]
    if missing:
        raise LabctlError(
            f"building a node image needs {', '.join(missing)}",
            hint=f"apt-get install {' '.join(missing)}",
        )
    if os.geteuid() != 0:
        raise LabctlError("building a node image needs root", hint="run labctl as root")


def _run_streamed(argv: list[str], progress: Progress, log: Path) -> None:
    """Run a long build step, passing its status lines to `progress`, keeping a log."""
    with os.fdopen(safefs.create(log, log.parent.parent, 0o640, append=True), "a") as log_file:
        log_file.write(f"$ {' '.join(argv)}\n")
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            log_file.write(line)
            if line.startswith(("I: ", "labctl: ")):
                progress(line.strip().removeprefix("I: "))
        if proc.wait() != 0:
            log_file.flush()
            tail = "".join(log.read_text().splitlines(keepends=True)[-25:])
            raise LabctlError(
                f"image build step failed ({argv[0]} exit {proc.returncode}):\n{tail}",
                hint=f"full log: {log}; check that Debian's package mirror is reachable "
                "(use --mirror URL for another one)",
            )


def built_artifacts_dir(recipe: Recipe) -> Path:
    """Where build.sh keeps what it compiled (siw.ko per kernel, the inspector client), so
    that the next image of the same userland suite installs them instead of downloading
    the kernel's whole source (about 150 MB) and a compiler again: build.sh adds the kernel
    package's ABI and version below it. Keyed by what the build reads from labctl."""
    inputs = [_resource_text("hooks", "build.sh"), _resource_text(CLIENT_SOURCE)]
    digest = hashlib.sha256(json.dumps(inputs).encode()).hexdigest()[:12]
    return cache_root() / "images" / ".built" / f"{recipe.suite}-{digest}"


def debs_dir() -> Path:
    """Debian packages downloaded by earlier image builds, offered to the next one (every
    image shares most of its packages with the others: a cold CI builds five)."""
    return cache_root() / "images" / ".debs"


def _prepare_shared_dir(path: Path) -> None:
    """A cache directory of ours: made if missing, refused when it or any directory on the
    way from the cache root is a link or a file (a planted link would have root write
    where it points), or is not root's."""
    cache_root().mkdir(parents=True, exist_ok=True)  # the user's choice: may be a link
    safefs.make_dirs(path, cache_root())  # a link or file below it: NotLabctls names it
    if path.lstat().st_uid != os.geteuid():
        raise LabctlError(f"{path} is not a directory labctl made",
                          hint=f"remove it (rm -rf {shlex.quote(str(path))}) and build again")


def prune_debs(directory: Path, keep_days: float = DEBS_KEEP_DAYS, *,
               dry_run: bool = False) -> list[Path]:
    """Drop packages no build has read for `keep_days` (sync-in reads each one, which
    updates its access time under relatime at least once a day): the directory keeps what
    the current images are made of, not every version ever downloaded. Returns what it
    dropped (with dry_run, what it would drop)."""
    cutoff = time.time() - keep_days * 86400
    dropped = []
    with os.scandir(directory) as found:
        for entry in found:
            if (entry.name.endswith(".deb") and entry.is_file(follow_symlinks=False)
                    and entry.stat(follow_symlinks=False).st_atime < cutoff):
                if not dry_run:
                    Path(entry.path).unlink(missing_ok=True)
                dropped.append(Path(entry.path))
    return sorted(dropped)


def _mmdebstrap(
    recipe: Recipe, rootdir: Path, mirror: str | None, progress: Progress, log: Path
) -> None:
    hooks = resources.files("labctl.images").joinpath("hooks")
    kernel_hook = Path(str(hooks.joinpath("kernel.sh")))
    build_hook = Path(str(hooks.joinpath("build.sh")))
    client = Path(str(resources.files("labctl.images").joinpath(CLIENT_SOURCE)))
    trim_hook = Path(str(hooks.joinpath("trim.sh")))
    built = built_artifacts_dir(recipe)
    debs = debs_dir()
    for directory in (built, debs):
        _prepare_shared_dir(directory)
    quoted_debs = shlex.quote(str(debs))
    argv = [
        "mmdebstrap",
        "--variant=minbase",
        "--mode=root",
        f"--include={','.join(recipe.packages)}",
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        # The packages earlier builds downloaded go in first, and stay after the essential
        # step, so apt downloads only what is new; they go back out before the trim. Data,
        # not authority: apt checks each file against this build's signed indexes.
        "--skip=essential/unlink",
        '--setup-hook=mkdir -p "$1"/var/cache/apt/archives/',
        f"--setup-hook=sync-in {quoted_debs} /var/cache/apt/archives/",
        f'--customize-hook=sh {kernel_hook} "$1" {recipe.kernel_suite}',
        # soft-iWARP (Debian's kernels lack it) and labctl's compiled inspector client
        f'--customize-hook=sh {build_hook} "$1" {recipe.kernel_suite} '
        f"{shlex.quote(str(client))} {shlex.quote(str(built))}",
        *(f'--customize-hook=sh {shlex.quote(str(hooks.joinpath(h)))} "$1"'
          for h in recipe.hooks),
        f"--customize-hook=sync-out /var/cache/apt/archives {quoted_debs}",
        f'--customize-hook=sh {trim_hook} "$1"',
        # Options end here: no suite, path or mirror after it is ever read as an option
        # (mmdebstrap's Getopt reads options after its arguments too).
        "--",
        recipe.suite,
        str(rootdir),
    ]
    if mirror:
        check_mirror(mirror)  # checked where it entered too: this is the last gate to root
        argv.append(mirror)
    _run_streamed(argv, progress, log)


def _module_files(rootdir: Path, kernel: str, modules: tuple[str, ...]) -> list[Path]:
    """Module files (in load order) for `modules` and their dependencies, per modprobe."""
    ordered: list[Path] = []
    for module in modules:
        out = hostproc.run(
            ["chroot", str(rootdir), "modprobe", "-S", kernel, "--show-depends", module],
            timeout=CHROOT_SECONDS, what=f"modprobe --show-depends {module} (in the image)",
            hint=REBUILD_HINT).stdout
        for line in out.splitlines():
            if line.startswith("insmod "):
                path = rootdir / line.split()[1].lstrip("/")
                if path not in ordered:
                    ordered.append(path)
    return ordered


MODULE_SIG_MAGIC = b"~Module signature appended~\n"
MODULE_SIG_INFO = 12  # struct module_signature, its last 4 bytes the signature's length


def unsigned_module(data: bytes) -> bytes:
    """A module without the signature Debian appends to it. Checking it cost 0.1-0.2 s
    per module under TCG (measured: insmod of ib_umad 0.19-0.29 s signed, 0.08-0.11 s
    not), and a node loads about 18 at boot. The kernel loads it all the same (it enforces
    no signatures) and marks itself tainted (E), as siw's own module already does."""
    if not data.endswith(MODULE_SIG_MAGIC):
        return data
    info_end = len(data) - len(MODULE_SIG_MAGIC)
    sig_len = int.from_bytes(data[info_end - 4:info_end], "big")
    body_end = info_end - MODULE_SIG_INFO - sig_len
    if body_end <= 0:
        raise ValueError("malformed module signature")
    return data[:body_end]


def _write_initrd(rootdir: Path, kernel: str, target: Path) -> None:
    archive = CpioWriter()
    for directory in ("bin", "dev", "proc", "sys", "newroot", "modules"):
        archive.directory(directory)
    archive.file("bin/busybox", (rootdir / "usr/bin/busybox").read_bytes(), 0o755)
    archive.file("init", _resource_text("initramfs-init.sh").encode(), 0o755)
    for name, link in DEV_LINKS:
        archive.symlink(f"devlinks/{name}", link)
    names = []
    for path in _module_files(rootdir, kernel, STAGE1_MODULES):
        data = path.read_bytes()
        if path.suffix == ".xz":  # busybox insmod cannot decompress
            data = lzma.decompress(data)
        name = path.name.removesuffix(".xz")
        names.append(name)
        archive.file(f"modules/{name}", unsigned_module(data))
    archive.file("modules/order", ("\n".join(names) + "\n").encode())
    target.write_bytes(archive.render())


def _decompress_node_modules(rootdir: Path, kernel: str) -> None:
    for path in _module_files(rootdir, kernel, NODE_MODULES):
        if path.suffix == ".xz":
            path.with_suffix("").write_bytes(unsigned_module(lzma.decompress(path.read_bytes())))
            path.unlink()
        else:
            path.write_bytes(unsigned_module(path.read_bytes()))
    hostproc.run(["chroot", str(rootdir), "depmod", kernel], timeout=CHROOT_SECONDS,
                 what="depmod (in the image)", hint=REBUILD_HINT)


def _package_versions(rootdir: Path) -> dict[str, str]:
    out = hostproc.run(
        ["chroot", str(rootdir), "dpkg-query", "-W", "-f", "${Package} ${Version}\n"],
        timeout=CHROOT_SECONDS, what="dpkg-query (in the image)", hint=REBUILD_HINT).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if line)


def extract_vmlinux(bzimage: Path, target: Path) -> bool:
    """Uncompress the kernel inside a bzImage (zstd, xz or gzip); False if not possible.

    The payload's offset and length are in the boot protocol header (setup_sects at
    0x1f1, payload_offset/payload_length at 0x248).
    """
    data = bzimage.read_bytes()
    setup_sectors = (data[0x1F1] or 4) + 1
    offset, length = struct.unpack_from("<II", data, 0x248)
    payload = data[setup_sectors * 512 + offset : setup_sectors * 512 + offset + length]
    try:
        if payload.startswith(b"\x28\xb5\x2f\xfd"):
            if shutil.which("zstd") is None:
                return False
            # the kernel appends the uncompressed size, which zstd reports as trailing junk
            # (a non-zero exit): only what it wrote counts
            out = hostproc.run_bytes(["zstd", "-dcq"], input=payload, check=False,
                                     timeout=CHROOT_SECONDS, limit=VMLINUX_BYTES)
        elif payload.startswith(b"\xfd7zXZ\x00"):
            out = lzma.LZMADecompressor().decompress(payload)
        elif payload.startswith(b"\x1f\x8b"):
            out = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(payload)
        else:
            return False
    except (lzma.LZMAError, zlib.error, OSError, hostproc.HostProcessError):
        return False
    # Only an ELF kernel with a PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY) boots this way.
    if not out.startswith(b"\x7fELF") or b"Xen\x00" not in out:
        return False
    target.write_bytes(out)
    return True


def _dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _make_ext4(rootdir: Path, target: Path, progress: Progress, log: Path) -> None:
    used = _dir_size(rootdir)
    # Room for node state (logs, test files) on top of the content; sparse on the host.
    size_mib = used // (1 << 20) * 13 // 10 + 512
    _run_streamed(
        [
            "mkfs.ext4",
            "-q",
            "-F",
            "-L",
            "labroot",
            "-d",
            str(rootdir),
            "-E",
            "root_owner=0:0",
            str(target),
            f"{size_mib}M",
        ],
        progress,
        log,
    )


def build_image(
    recipe: Recipe,
    mirror: str | None = None,
    *,
    force: bool = False,
    progress: Progress = lambda _msg: None,
) -> Image:
    """Return the cached image for `recipe`, building it first when it is missing (or
    corrupt: it is built anew in its place)."""
    check_mirror(mirror)  # before anything is made
    final = image_dir(recipe, mirror)
    if not force and (cached := usable_image(final)) is not None:
        return cached
    _check_host_tools()
    final.parent.mkdir(parents=True, exist_ok=True)
    # One build per image at a time: a second labctl waits, then finds it in the cache.
    lock = safefs.create(final.parent / f".lock-{final.name}", final.parent, 0o600,
                         append=True, make_parents=False)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        progress("waiting for another labctl building the same image")
        fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        if not force and (cached := usable_image(final)) is not None:
            return cached
        return _build_locked(recipe, mirror, final, force, progress)
    finally:
        os.close(lock)


def _build_locked(
    recipe: Recipe, mirror: str | None, final: Path, force: bool, progress: Progress
) -> Image:
    # a new directory of its own, never one planted under a known name
    work = Path(tempfile.mkdtemp(prefix=f".build-{final.name}-", suffix=f"-{os.getpid()}",
                                 dir=final.parent))
    log = final.parent / "logs" / f"{final.name}.build.log"
    os.close(safefs.create(log, final.parent, 0o640))  # a new, empty log
    started = time.monotonic()
    try:
        rootdir = work / "rootfs"
        progress(f"debootstrap {recipe.suite} + kernel from {recipe.kernel_suite}")
        _mmdebstrap(recipe, rootdir, mirror, progress, log)
        prune_debs(debs_dir())
        kernel = (rootdir / "etc/labctl-kernel").read_text().strip()
        shutil.copyfile(rootdir / f"usr/lib/modules/{kernel}/vmlinuz", work / "vmlinuz")
        extract_vmlinux(work / "vmlinuz", work / "vmlinux")
        progress("stage-1 initramfs")
        _write_initrd(rootdir, kernel, work / "initrd.cpio")
        _decompress_node_modules(rootdir, kernel)
        versions = _package_versions(rootdir)
        progress("root filesystem image (ext4)")
        _make_ext4(rootdir, work / "root.ext4", progress, log)
        manifest = {
            "name": recipe.name,
            "key": final.name,
            "suite": recipe.suite,
            "kernel_suite": recipe.kernel_suite,
            "kernel": kernel,
            "rdma_core": versions.get("rdma-core", "?"),
            "siw": (rootdir / f"usr/lib/modules/{kernel}/updates/siw.ko").is_file(),
            "packages": versions,
            # a topology's `packages:` (what makes this image differ from its recipe's)
            "added_packages": sorted(set(recipe.packages) - set(
                RECIPES[recipe.name].packages if recipe.name in RECIPES else ())),
            "rootfs_bytes": _dir_size(rootdir),
            "build_seconds": round(time.monotonic() - started, 1),
        }
        shutil.rmtree(rootdir)
        (work / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
        # Built because forced, or because what is there is corrupt or half-made: replaced.
        if final.is_symlink():
            final.unlink()  # the link only, never what it names
        shutil.rmtree(final, ignore_errors=True)
        work.rename(final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Image.at(final)
