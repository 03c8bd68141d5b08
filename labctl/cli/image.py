"""`labctl image build|box|list`: node images (and their Vagrant boxes) in the cache."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from labctl.cli.common import HELP_SETTINGS, MirrorOption, console, err_console, progress_reporter
from labctl.cli.report import on_interrupt
from labctl.cli.safeprint import outside_text, print_json
from labctl.cli.shapes import (
    CacheEntry,
    ImageBuildOutput,
    ImageRecord,
    ImageRemovalOutput,
)
from labctl.data.recipes import RECIPES, recipe
from labctl.errors import LabctlError, UsageError
from labctl.images import cache
from labctl.images.builder import CorruptImage, Image, build_image, image_dir
from labctl.paths import cache_root

if TYPE_CHECKING:
    from labctl.vm.saved import SavedListing

image_app = typer.Typer(help="Build and list node images.", no_args_is_help=True,
                        context_settings=HELP_SETTINGS)


@image_app.command()
def build(
    name: str = typer.Argument("trixie", help=f"Image recipe: {', '.join(RECIPES)}.",
                               metavar="NAME"),
    mirror: str = MirrorOption,
    force: bool = typer.Option(False, help="Rebuild even if the cache has it."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (docs/json.md)."),
) -> None:
    """Build a node image (a no-op when the cache already holds it)."""
    chosen = recipe(name)  # a name that is no recipe: exit 2 here
    on_interrupt(image_build_interrupted(name))
    started = time.monotonic()
    with progress_reporter(f"image {name}") as progress:
        image = build_image(chosen, mirror, force=force, progress=progress)
    m = image.manifest
    if as_json:
        record: ImageBuildOutput = {
            "name": name, "key": str(m["key"]), "kernel": str(m["kernel"]),
            "rdma_core": str(m["rdma_core"]), "path": str(image.path),
            "seconds": round(time.monotonic() - started, 1)}
        print_json(record)
        return
    console.print(
        f"image {m['key']}: kernel {m['kernel']}, rdma-core {m['rdma_core']} "
        f"({time.monotonic() - started:.1f} s) at {image.path}"
    )


def image_build_interrupted(name: str) -> str:
    # build_image builds in a scratch directory it removes on any exit, and renames it
    # into place only when whole: an interrupted build leaves no image to clean.
    return (f"no image {name} was made and no lab is touched: a half-built image is never "
            f"used, and `labctl image build {name}` builds it again")


@image_app.command()
def box(
    name: str = typer.Argument("trixie", help=f"Image recipe: {', '.join(RECIPES)}.",
                               metavar="NAME"),
    mirror: str = MirrorOption,
) -> None:
    """Make a Vagrant box (libvirt) of a node image, building the image first if needed;
    a no-op when the cache holds it (docs/vagrant.md)."""
    from labctl.images.box import build_box

    started = time.monotonic()
    with progress_reporter(f"box {name}") as progress:
        made = build_box(name, mirror=mirror, progress=progress)
    console.print(f"box {made.name} ({time.monotonic() - started:.1f} s): {made.file}\n"
                  f"add it with: vagrant box add --name {made.name} {made.file}")


# The keys of an image record in `image list --json` read from its manifest.json: the
# record's keys but the two labctl adds.
IMAGE_KEYS = tuple(k for k in ImageRecord.__annotations__
                   if k not in ("added_packages", "path", "disk_bytes"))


def added_packages(image: Image) -> list[str] | None:
    """The packages a topology's `packages:` added to the image's recipe ([] for the
    recipe's own image); None when the image does not say (built before labctl recorded
    it) and is not the recipe's own image of today."""
    recorded = image.manifest.get("added_packages")
    if isinstance(recorded, list):
        return [str(p) for p in recorded]
    name = str(image.manifest.get("name", ""))
    if name in RECIPES and image.path.name == image_dir(RECIPES[name]).name:
        return []
    return None


def image_label(image: Image) -> str:
    """What the image is: its recipe, plus the packages added to it."""
    name = str(image.manifest.get("name", "?"))
    added = added_packages(image)
    if added is None:
        return f"{name} + packages not recorded (built by an older labctl)"
    return f"{name} + {' '.join(added)}" if added else name


@image_app.command("list")
def list_images(
    as_json: bool = typer.Option(
        False, "--json",
        help="Print JSON: an object whose list `images` has one record per image "
             "(docs/json.md)."),
) -> None:
    """List cached images, the saved machines qemu nodes are restored from, and what each
    entry of the cache takes on disk."""
    from labctl.vm.saved import list_saved

    root = cache_root()  # a linked cache is listed: only removing refuses it
    base = root / "images"
    images, corrupt = cached_images(base)
    saved = list_saved(root / "saved")
    entries = cache.entries(root)
    sizes = {e.path: e.bytes for e in entries}
    total = sum(e.bytes for e in entries)
    if as_json:
        records = [{k: i.manifest.get(k) for k in IMAGE_KEYS}
                   | {"added_packages": added_packages(i), "path": str(i.path),
                      "disk_bytes": sizes.get(i.path, 0)}
                   for i in images]
        output = {"images": records, "corrupt": [
            {"path": str(c.path), "problem": c.problem} for c in corrupt],
            "saved": [{"path": str(s.path), "image": s.image, "shape": s.shape,
                       "state_bytes": s.state_bytes, "ram_bytes": s.ram_bytes,
                       "made": s.made, "usable": s.usable,
                       "disk_bytes": sizes.get(s.path, 0)}
                      for s in saved],
            "cache": {"root": str(root), "total_bytes": total,
                      "entries": [entry_record(e) for e in entries]}}
        print_json(output)
        return
    table = Table(title=f"images in {base}")
    for column in ("image", "recipe + packages", "kernel", "rdma-core", "root fs",
                   "on disk", "built in"):
        table.add_column(column)
    for i in images:
        m = i.manifest
        # Text, not markup: a manifest is a file of the cache ("[/]" in it is no markup)
        table.add_row(
            outside_text(m["key"]),
            outside_text(image_label(i)),
            outside_text(m["kernel"]),
            outside_text(m["rdma_core"]),
            f"{m['rootfs_bytes'] >> 20} MiB",
            _size(sizes.get(i.path, 0)),
            f"{m['build_seconds']} s",
        )
    console.print(table)
    if saved:
        console.print(saved_table(saved, sizes))
    for c in corrupt:  # one corrupt image does not hide the others
        err_console.print(f"[yellow]corrupt:[/] {escape(c.message)}\n  [yellow]hint:[/] "
                          f"{escape(c.hint or '')}", highlight=False, soft_wrap=True)
    console.print(outside_text(f"cache total: {_size(total)} on disk in {root} "
                               f"({kinds_summary(entries)})"), soft_wrap=True)


KIND_NAMES = {cache.IMAGE: "images", cache.LOG: "build logs", cache.SAVED: "saved machines",
              cache.BOX: "boxes", cache.DOCKER_DISK: "Docker data disks",
              cache.BUILT: "compiled modules", cache.PACKAGE: "packages",
              cache.KERNEL: "kernels", cache.OTHER: "other"}


KIND_ONE = {cache.IMAGE: "image", cache.LOG: "build log", cache.SAVED: "saved machine",
            cache.BOX: "box", cache.DOCKER_DISK: "Docker data disk",
            cache.BUILT: "compiled modules", cache.PACKAGE: "package", cache.KERNEL: "kernel",
            cache.OTHER: "entry"}


def kinds_summary(entries: list[cache.Entry]) -> str:
    """`images 1.2 GiB, saved machines 300 MiB, ...`, the kinds the cache holds."""
    by_kind: dict[str, int] = {}
    for e in entries:
        by_kind[e.kind] = by_kind.get(e.kind, 0) + e.bytes
    parts = [f"{KIND_NAMES[k]} {_size(by_kind[k])}" for k in KIND_NAMES if k in by_kind]
    return ", ".join(parts) or "empty"


def entry_record(entry: cache.Entry) -> CacheEntry:
    return {"kind": entry.kind, "path": str(entry.path),  # type: ignore[typeddict-item]
            "image": entry.image, "disk_bytes": entry.bytes, "current": entry.current}


def saved_table(saved: list[SavedListing], sizes: dict[Path, int]) -> Table:
    table = Table(title="saved machines (qemu nodes are restored from them)")
    for column in ("image", "shape", "state", "RAM", "on disk", "made", "used by this labctl"):
        table.add_column(column, no_wrap=column in ("shape", "used by this labctl"))
    for s in saved:
        shape = ("not recorded" if s.shape is None else
                 f"{s.shape.get('rdma')}, {s.shape.get('memory_mib')} MiB, "
                 f"{s.shape.get('cpus')} CPU, {s.shape.get('nics')} NIC, "
                 f"{s.shape.get('accel')}")
        table.add_row(
            outside_text(s.image), outside_text(shape),
            _size(s.state_bytes), _size(s.ram_bytes), _size(sizes.get(s.path, 0)),
            _when(s.made),
            "yes" if s.usable else "no (removed at the next save)")
    return table


def _when(made: float | None) -> str:
    """A saved machine's `made` (from its meta.json: any number) as a UTC time, or "?"."""
    try:
        return "?" if made is None else time.strftime("%Y-%m-%d %H:%M", time.gmtime(made))
    except (OverflowError, OSError, ValueError):  # 1e300: past what time_t holds
        return "?"


def _size(size: int | None) -> str:
    if size is None:
        return "?"
    if size >= 1 << 30:
        return f"{size / (1 << 30):.1f} GiB"
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


# What an interrupted rm or prune leaves: an entry half removed, which labctl treats as
# missing (an image without its files is built anew, a saved machine made again).
REMOVAL_CUT_SHORT = ("an entry may be half removed: run the command again to finish; "
                     "labctl builds a half-removed image again when it is needed")


@image_app.command("rm")
def rm(
    name: str = typer.Argument(
        ..., metavar="NAME",
        help="A recipe (its image of today: trixie) or a cached image's key "
             "(trixie-0123456789abcdef, as `labctl image list` shows)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (docs/json.md)."),
) -> None:
    """Remove a cached image with its build log, the saved machines, Vagrant boxes and
    Docker data disks made from it; refused while a lab that is up uses it."""
    root = cache.checked_root()
    key = image_dir(RECIPES[name]).name if name in RECIPES else name
    if name not in RECIPES and not cache.IMAGE_KEY_RE.fullmatch(name):
        raise UsageError(f"no image recipe or cached image named {name!r}",
                         hint=f"give a recipe ({', '.join(RECIPES)}) or an image key "
                              "`labctl image list` shows")
    chosen = [e for e in cache.entries(root) if e.image == key]
    if not chosen:
        raise UsageError(f"image {key} is not in the cache {root}",
                         hint="`labctl image list` shows the cached images")
    used = cache.in_use()
    on_interrupt(REMOVAL_CUT_SHORT)
    if used.uses(key):
        why = "; ".join(used.why) if key not in used.keys else "a lab that is up uses it"
        raise UsageError(f"image {key} is in use: {why}",
                         hint="`labctl status` shows the labs that are up: take down the one "
                              "using it (labctl down --lab NAME), then remove the image")
    done = cache.remove_entries(root, chosen, dry_run=False)
    if done.busy:
        raise LabctlError(f"a build of image {key} is in progress: not removed",
                          hint="wait for the build to end, then run this again")
    report_removal(done, dry_run=False, in_use=[], as_json=as_json)


@image_app.command()
def prune(
    everything: bool = typer.Option(
        False, "--all",
        help="Remove everything in the cache but what a lab that is up uses."),
    dry_run: bool = typer.Option(False, "--dry-run",
                                 help="Show what would be removed; remove nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (docs/json.md)."),
) -> None:
    """Remove what no current recipe uses: images of old keys with their saved machines,
    Vagrant boxes and Docker data disks, old compiled modules, and packages no build has
    read for 14 days. An image being built and what a lab that is up uses stay."""
    root = cache.checked_root()
    entries = cache.entries(root)
    used = cache.in_use()
    if not dry_run:
        on_interrupt(REMOVAL_CUT_SHORT)
    chosen = cache.prune_choice(entries, used, everything)
    if not everything:
        chosen += cache.old_packages(root)
    in_use = sorted({e.image for e in entries if e.image is not None and used.uses(e.image)
                     and (everything or not e.current)})
    done = cache.remove_entries(root, chosen, dry_run=dry_run)
    for why in used.why:
        err_console.print(outside_text(f"kept every image: {why}"), soft_wrap=True)
    report_removal(done, dry_run=dry_run, in_use=in_use, as_json=as_json)


def report_removal(done: cache.Removal, *, dry_run: bool, in_use: list[str],
                   as_json: bool) -> None:
    if as_json:
        output: ImageRemovalOutput = {
            "dry_run": dry_run, "removed": [entry_record(e) for e in done.removed],
            "freed_bytes": done.freed, "busy": [entry_record(e) for e in done.busy],
            "in_use": in_use}
        print_json(output)
        return
    verb = "would remove" if dry_run else "removed"
    for e in done.removed:
        console.print(outside_text(f"{verb} {KIND_ONE[e.kind]} {e.path} "
                                   f"({_size(e.bytes)})"), soft_wrap=True)
    for e in done.busy:
        console.print(outside_text(f"kept {e.path}: a build of its image is in progress"),
                      soft_wrap=True)
    for key in in_use:
        console.print(outside_text(f"kept {key}: a lab that is up uses it"), soft_wrap=True)
    if not done.removed:
        console.print("nothing to remove")
    console.print(f"{'would free' if dry_run else 'freed'} {_size(done.freed)}")


def cached_images(base: Path) -> tuple[list[Image], list[CorruptImage]]:
    """The images in the cache directory `base`, and those whose manifest is corrupt."""
    images: list[Image] = []
    corrupt: list[CorruptImage] = []
    for path in sorted(base.glob("*")):
        try:
            images.append(Image.at(path))
        except (FileNotFoundError, NotADirectoryError):  # not an image (logs/, a file)
            continue
        except CorruptImage as exc:
            corrupt.append(exc)
    return images, corrupt


def register(app: typer.Typer) -> None:
    app.add_typer(image_app, name="image")
