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
from labctl.cli.shapes import ImageBuildOutput, ImageRecord
from labctl.data.recipes import RECIPES, recipe
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
IMAGE_KEYS = tuple(k for k in ImageRecord.__annotations__ if k not in ("added_packages", "path"))


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
    """List cached images, and the saved machines qemu nodes are restored from."""
    from labctl.vm.saved import list_saved

    base = cache_root() / "images"
    images, corrupt = cached_images(base)
    saved = list_saved(cache_root() / "saved")
    if as_json:
        records = [{k: i.manifest.get(k) for k in IMAGE_KEYS}
                   | {"added_packages": added_packages(i), "path": str(i.path)}
                   for i in images]
        print_json({"images": records, "corrupt": [
            {"path": str(c.path), "problem": c.problem} for c in corrupt],
            "saved": [{"path": str(s.path), "image": s.image, "shape": s.shape,
                       "state_bytes": s.state_bytes, "ram_bytes": s.ram_bytes,
                       "made": s.made, "usable": s.usable}
                      for s in saved]})
        return
    table = Table(title=f"images in {base}")
    for column in ("image", "recipe + packages", "kernel", "rdma-core", "root fs", "built in"):
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
            f"{m['build_seconds']} s",
        )
    console.print(table)
    if saved:
        console.print(saved_table(saved))
    for c in corrupt:  # one corrupt image does not hide the others
        err_console.print(f"[yellow]corrupt:[/] {escape(c.message)}\n  [yellow]hint:[/] "
                          f"{escape(c.hint or '')}", highlight=False, soft_wrap=True)


def saved_table(saved: list[SavedListing]) -> Table:
    table = Table(title="saved machines (qemu nodes are restored from them)")
    for column in ("image", "shape", "state", "RAM", "made", "used by this labctl"):
        table.add_column(column, no_wrap=column == "shape")
    for s in saved:
        shape = ("not recorded" if s.shape is None else
                 f"{s.shape.get('rdma')}, {s.shape.get('memory_mib')} MiB, "
                 f"{s.shape.get('cpus')} CPU, {s.shape.get('nics')} NIC, "
                 f"{s.shape.get('accel')}")
        table.add_row(
            outside_text(s.image), outside_text(shape),
            _size(s.state_bytes), _size(s.ram_bytes), _when(s.made),
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
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


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
