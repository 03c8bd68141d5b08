"""What the image cache holds, what each entry costs on disk, and removing what is old.

The cache (labctl.paths.cache_root()) holds:
  images/NAME-KEY/          a node image (labctl/images/builder.py)
  images/logs/KEY.build.log its build's log
  images/.debs/             packages shared by image builds
  images/.built/SUITE-HASH/ compiled siw and inspector client
  saved/IMAGE-KEY-HASH/     saved machines restored nodes start from (labctl/vm/saved.py)
  boxes/IMAGE-KEY-HASH/     Vagrant boxes (labctl/images/box.py)
  docker-host/IMAGE-KEY[.VM].docker.ext4  the Docker engine's data disks
  kernels/RELEASE-HASH/     a kernel of the nodes' own, made ready (labctl/images/kernels.py)
  kernels/debian/RELEASE_VERSION/  a Debian kernel package unpacked (debian_kernels.py)

An entry is current when labctl of today still makes or reads it: an image whose key is
the one its recipe (and its recorded added packages) gives now, and what was made from
such an image. Nothing here follows a link: an entry that is a link is removed as a link.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from labctl.data.recipes import RECIPES, with_packages
from labctl.errors import LabctlError, UsageError
from labctl.images.builder import (
    DEBS_KEEP_DAYS,
    built_artifacts_dir,
    image_dir,
    prune_debs,
    usable_image,
)
from labctl.locks import try_lock
from labctl.paths import cache_root, docker_hosts_root
from labctl.store.labdir import LabDir, running_labs
from labctl.store.state import read_state

# kinds of entries, as `image list --json` and `image prune --json` name them
IMAGE, LOG, SAVED, BOX, DOCKER_DISK, BUILT, PACKAGE, KERNEL, OTHER = (
    "image", "log", "saved", "box", "docker-disk", "built", "package", "kernel", "other")
# The kinds an image's or a build's key names: old ones go with `image prune`.
KEYED = (IMAGE, LOG, SAVED, BOX, DOCKER_DISK, BUILT)
# An image's key: its recipe's name, a dash, 16 hex digits (builder.image_key).
IMAGE_KEY_RE = re.compile(r"[a-z0-9][a-z0-9-]*-[0-9a-f]{16}")
# The Docker host VMs' directories (labctl/dockerhost/vm.py DIR_PREFIX) in their root.
DOCKER_HOST_DIR_RE = re.compile(r"docker-host(-[a-z0-9-]+)?")


@dataclass(frozen=True)
class Entry:
    """One entry of the cache: a path directly below one of its folders."""

    kind: str
    path: Path
    image: str | None  # the image key it belongs to; None for shared entries
    bytes: int  # on disk: allocated blocks, links not followed
    current: bool  # labctl of today makes or reads it


@dataclass
class InUse:
    """What the labs that are up use: image keys, and whether one could not be read (then
    every image counts as used)."""

    keys: set[str] = field(default_factory=set)
    kernels: set[Path] = field(default_factory=set)  # entries below kernels/ they boot
    everything: bool = False
    why: list[str] = field(default_factory=list)

    def uses(self, image: str | None) -> bool:
        return image is not None and (self.everything or image in self.keys)

    def boots(self, entry: Entry) -> bool:
        """Whether a lab that is up boots the kernel entry `entry` (every one when a lab's
        files could not be read)."""
        return entry.kind == KERNEL and (self.everything or entry.path in self.kernels)


def checked_root() -> Path:
    """The cache root to remove from, refused when it is a link: every path below it would
    lead elsewhere, and nothing outside the cache is removed."""
    root = cache_root()
    if root.is_symlink():
        raise UsageError(f"the image cache {root} is a symbolic link: labctl removes "
                         "nothing through it",
                         hint="point LABCTL_CACHE_DIR at the directory it names "
                              f"(LABCTL_CACHE_DIR=$(readlink -f {root})), then run this again")
    return root


def disk_bytes(path: Path) -> int:
    """What `path` takes on disk: st_blocks * 512 of it and, for a real directory,
    everything below it; links are counted as links, hard links once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [path]
    while stack:
        current = stack.pop()
        try:
            info = current.lstat()
        except OSError:
            continue  # gone meanwhile
        if (info.st_dev, info.st_ino) in seen:
            continue
        seen.add((info.st_dev, info.st_ino))
        total += info.st_blocks * 512
        if stat.S_ISDIR(info.st_mode):
            try:
                with os.scandir(current) as found:
                    stack.extend(Path(e.path) for e in found)
            except OSError:
                continue
    return total


def _scan(folder: Path) -> list[os.DirEntry[str]]:
    """The entries of `folder` when it is a real directory ([] when missing or a link)."""
    if folder.is_symlink() or not folder.is_dir():
        return []
    with os.scandir(folder) as found:
        return sorted(found, key=lambda e: e.name)


def current_image(path: Path) -> bool:
    """The image at `path` is the one its recipe, with the packages it records as added,
    makes today (an image built with --mirror has a key of its own: not current)."""
    image = usable_image(path)
    if image is None:
        return False
    name = str(image.manifest.get("name", ""))
    added = image.manifest.get("added_packages") or []
    if name not in RECIPES or not isinstance(added, list):
        return False
    made = with_packages(RECIPES[name], tuple(str(p) for p in added))
    return path.name == image_dir(made).name


def _entry(kind: str, path: Path, image: str | None, current: bool) -> Entry:
    return Entry(kind, path, image, disk_bytes(path), current)


def entries(root: Path | None = None) -> list[Entry]:
    """Every entry of the cache, with its size and whether it is current. Lock files and
    the work directories of builds in progress (hidden names below images/, saved/,
    boxes/, docker-host/) are not entries: never removed here."""
    root = cache_root() if root is None else root
    images = root / "images"
    found: list[Entry] = []
    current_keys: set[str] = set()
    built_names = {built_artifacts_dir(r).name for r in RECIPES.values()}
    for e in _scan(images):
        path = Path(e.path)
        if e.name.startswith((".lock-", ".build-")):
            continue
        if e.name == ".debs" and e.is_dir(follow_symlinks=False):
            found += [_entry(PACKAGE, Path(d.path), None, True) for d in _scan(path)]
        elif e.name == ".built" and e.is_dir(follow_symlinks=False):
            found += [_entry(BUILT, Path(b.path), None, b.name in built_names)
                      for b in _scan(path)]
        elif e.name == "logs" and e.is_dir(follow_symlinks=False):
            for log in _scan(path):
                key = log.name.removesuffix(".build.log")
                found.append(_entry(LOG, Path(log.path), key if IMAGE_KEY_RE.fullmatch(key)
                                    else None, False))
        elif IMAGE_KEY_RE.fullmatch(e.name) and e.is_dir(follow_symlinks=False):
            is_current = current_image(path)
            if is_current:
                current_keys.add(e.name)
            found.append(_entry(IMAGE, path, e.name, is_current))
        else:
            found.append(_entry(OTHER, path, None, False))
    # a log is current when its image is
    found = [Entry(f.kind, f.path, f.image, f.bytes, f.image in current_keys)
             if f.kind == LOG else f for f in found]
    # hidden names below these folders are locks and the work of makes in progress
    for folder, kind in (("saved", SAVED), ("boxes", BOX)):
        for e in _scan(root / folder):
            if e.name.startswith("."):
                continue
            key = e.name.rpartition("-")[0]  # IMAGE-KEY-HASH
            image = key if IMAGE_KEY_RE.fullmatch(key) else None
            found.append(_entry(kind, Path(e.path), image, image in current_keys))
    for e in _scan(root / "docker-host"):
        if e.name.startswith("."):
            continue
        key = e.name.partition(".")[0]  # IMAGE-KEY[.VM].docker.ext4
        image = key if IMAGE_KEY_RE.fullmatch(key) else None
        found.append(_entry(DOCKER_DISK, Path(e.path), image, image in current_keys))
    found += _kernel_entries(root / "kernels")
    known = {"images", "saved", "boxes", "docker-host", "kernels"}
    for e in _scan(root):
        if e.name not in known or e.is_symlink():  # a linked folder is not looked into
            found.append(_entry(OTHER, Path(e.path), None, False))
    return found


def _kernel_entries(kernels: Path) -> list[Entry]:
    """The kernels of the nodes' own made ready, and the Debian kernels fetched: labctl
    makes each from its source again when it is gone, so `image prune --all` may remove
    them, and plain `image prune` leaves them (no recipe's key names them). Hidden names
    are locks and work in progress."""
    found = []
    for e in _scan(kernels):
        if e.name.startswith("."):
            continue
        if e.name == "debian" and e.is_dir(follow_symlinks=False):
            found += [_entry(KERNEL, Path(d.path), None, True) for d in _scan(Path(e.path))
                      if not d.name.startswith(".")]
        else:
            found.append(_entry(KERNEL, Path(e.path), None, True))
    return found


def in_use() -> InUse:
    """The image keys the labs that are up use (their nodes' qemu command lines name the
    image directories, and each node's recipe gives its key), and the Docker host VMs'."""
    used = InUse()
    for name in running_labs():
        labdir = LabDir(name)
        try:
            lab = labdir.load_lab()
            state = labdir.load_state()
        except LabctlError:
            used.everything = True
            used.why.append(f"lab {name}'s files cannot be read")
            continue
        from labctl.data.recipes import node_recipe

        for node in lab.nodes:
            try:
                used.keys.add(image_dir(node_recipe(node.image, node.packages)).name)
            except LabctlError:
                used.everything = True
                used.why.append(f"lab {name}'s node {node.name} has an unknown image")
            if node.kernel_path is not None:  # a Debian kernel's folder is in the cache
                used.kernels.update(_kernels_named([node.kernel_path], cache_root()))
        for info in state.nodes.values():
            used.keys.update(_keys_named(info.argv, cache_root()))
            used.kernels.update(_kernels_named(info.argv, cache_root()))
    _docker_host_images(used)
    return used


def _named_below(argv: list[str], root: Path, folder: str) -> Iterator[list[str]]:
    """For each place these arguments name a path below the cache's `folder`, that path's
    first two parts after it (a path ends at a '/', ',' or ':' of qemu's option syntax)."""
    marker = f"{root}/{folder}/"
    for arg in argv:
        start = arg.find(marker)
        while start != -1:
            yield re.split(r"[/,:]", arg[start + len(marker):], maxsplit=2)[:2]
            start = arg.find(marker, start + 1)


def _keys_named(argv: list[str], root: Path) -> set[str]:
    """The image keys a node's command line names through paths in the cache: an image's
    files (images/KEY/...), a saved machine's (saved/KEY-HASH/...), a Docker data disk
    (docker-host/KEY[.VM].docker.ext4)."""
    keys = set()
    for folder, key_of in (("images", lambda name: name),
                           ("saved", lambda name: name.rpartition("-")[0]),
                           ("docker-host", lambda name: name.partition(".")[0])):
        for parts in _named_below(argv, root, folder):
            key = key_of(parts[0])
            if IMAGE_KEY_RE.fullmatch(key):
                keys.add(key)
    return keys


def _kernels_named(argv: list[str], root: Path) -> set[Path]:
    """The entries below the cache's kernels/ that these arguments name (a node boots a
    made-ready kernel's files: kernels/RELEASE-HASH/...; a lab's node records the Debian
    kernel it was made from: kernels/debian/RELEASE_VERSION)."""
    found = set()
    for parts in _named_below(argv, root, "kernels"):
        if parts[0] == "debian" and len(parts) > 1:
            found.add(root / "kernels" / "debian" / parts[1])
        elif parts[0] and not parts[0].startswith("."):
            found.add(root / "kernels" / parts[0])
    return found


def _docker_host_images(used: InUse) -> None:
    root = docker_hosts_root()
    if not root.is_dir():
        return
    for e in _scan(root):
        if not DOCKER_HOST_DIR_RE.fullmatch(e.name) or not e.is_dir(follow_symlinks=False):
            continue
        try:
            state = read_state(Path(e.path) / "state.json", e.name)
        except LabctlError:
            used.everything = True
            used.why.append(f"the Docker host VM in {e.path} cannot be read")
            continue
        if state is not None and state.vm is not None:
            used.keys.add(state.vm.image)
        elif state is not None:
            used.everything = True
            used.why.append(f"the Docker host VM in {e.path} records no image")


def _lock_paths(root: Path, entry: Entry) -> list[Path]:
    """The lock files whoever makes `entry` holds: the builder's of its image
    (images/.lock-KEY), a saved machine's own (saved/.NAME.lock), a box's
    (boxes/.lock-NAME)."""
    paths = []
    images = root / "images"
    if entry.image is not None and images.is_dir() and not images.is_symlink():
        paths.append(images / f".lock-{entry.image}")
    if entry.kind == SAVED:
        paths.append(entry.path.with_name(f".{entry.path.name}.lock"))
    elif entry.kind == BOX:
        paths.append(entry.path.with_name(f".lock-{entry.path.name}"))
    elif entry.kind == KERNEL and entry.path.parent.name == "debian":
        paths.append(entry.path.parent / ".lock")  # one for every Debian kernel's fetch
    elif entry.kind == KERNEL:
        paths.append(entry.path.with_name(f".{entry.path.name}.lock"))
    return paths


@contextmanager
def entry_locks(root: Path, entry: Entry) -> Iterator[bool]:
    """The locks of `entry`, taken without waiting: True when all are held, False when a
    build (or the making of a saved machine or box) holds one."""
    with ExitStack() as stack:
        for path in _lock_paths(root, entry):
            if not stack.enter_context(try_lock(path)):
                yield False
                return
        yield True


def remove(root: Path, path: Path) -> None:
    """Remove the entry `path` of the cache: a link or file is unlinked, a real directory
    removed with all below it (shutil.rmtree never follows a link inside it)."""
    if os.path.commonpath([root, path]) != str(root) or path == root:
        raise LabctlError(f"{path} is not in the image cache {root}",
                          hint="this is a bug in labctl: report it")
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(path)
    else:
        path.unlink()


@dataclass
class Removal:
    """What a removal took (or would take) away."""

    removed: list[Entry] = field(default_factory=list)
    busy: list[Entry] = field(default_factory=list)  # a build holds its image's lock

    @property
    def freed(self) -> int:
        return sum(e.bytes for e in self.removed)


def remove_entries(root: Path, chosen: list[Entry], dry_run: bool) -> Removal:
    """Remove `chosen`, each under its image's build lock (an image being built stays)."""
    done = Removal()
    for entry in chosen:
        if dry_run:  # nothing is taken or made, not even a lock file
            done.removed.append(entry)
            continue
        with entry_locks(root, entry) as held:
            if not held:
                done.busy.append(entry)
                continue
            remove(root, entry.path)
            done.removed.append(entry)
    return done


def old_packages(root: Path, keep_days: float = DEBS_KEEP_DAYS) -> list[Entry]:
    """The packages in images/.debs no build has read for `keep_days`."""
    debs = root / "images" / ".debs"
    if debs.is_symlink() or not debs.is_dir():
        return []
    old = prune_debs(debs, keep_days, dry_run=True)
    return [Entry(PACKAGE, p, None, disk_bytes(p), False) for p in old]


def prune_choice(all_entries: list[Entry], used: InUse, everything: bool) -> list[Entry]:
    """The entries `image prune` removes: those no current recipe uses (with --all every
    one), never one a lab that is up uses."""
    return [e for e in all_entries
            if (everything or (not e.current and e.kind in KEYED))
            and not used.uses(e.image) and not used.boots(e)
            and not (used.everything and e.kind in KEYED)]

