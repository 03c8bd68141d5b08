"""`labctl kernel config TREE`: a kernel tree's .config made ready for lab nodes."""

from __future__ import annotations

from pathlib import Path

import typer

from labctl.cli.common import HELP_SETTINGS, console
from labctl.errors import UsageError

kernel_app = typer.Typer(help="Kernels of your own for qemu nodes (docs/kernel.md).",
                         no_args_is_help=True, context_settings=HELP_SETTINGS)


@kernel_app.command()
def config(
    tree: Path = typer.Argument(..., help="A kernel source tree with a .config (after "
                                "`make defconfig`, say).", metavar="DIR"),
) -> None:
    """Set, in DIR/.config (a kernel tree), every option a lab node can use (rxe, siw,
    virtio, 9p for mounts, netem/u32/BPF for faults) that is not set yet, as
    `scripts/config --module` (or --enable) would; then run `make olddefconfig` and build."""
    from labctl import safefs
    from labctl.images import kconfig
    from labctl.images.kernels import read_kernel_file

    config_file = tree / ".config"
    if not (tree / "Makefile").is_file() or not config_file.is_file():
        raise UsageError(f"{tree} is not a configured kernel tree (no Makefile and .config)",
                         hint=f"configure it first: `make -C {tree} defconfig`")
    data = read_kernel_file(config_file)
    text, changed = kconfig.enable(data.decode(errors="replace"), kconfig.ALL)
    if not changed:
        console.print(f"{config_file}: every option labctl uses is set already",
                      highlight=False, soft_wrap=True)
        return
    # new files renamed into place (safefs): labctl runs as root, and a link planted in a
    # tree from elsewhere under either name is replaced, never written through
    backup = tree / ".config.old"
    safefs.write_bytes(backup, data, tree, 0o644)
    safefs.write_bytes(config_file, text.encode(), tree, 0o644)
    for option in changed:
        console.print(f"CONFIG_{option.name}={'m' if option.tristate else 'y'}  ({option.why})",
                      highlight=False)
    console.print(f"{config_file}: {len(changed)} options set (the old file is "
                  f"{backup.name}); next: `make -C {tree} olddefconfig` and build",
                  highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.add_typer(kernel_app, name="kernel")
