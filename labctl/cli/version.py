"""`labctl version`: labctl's, Python's and qemu's versions, and the image recipes."""

from __future__ import annotations

import platform
import shutil

import typer

from labctl import hostproc
from labctl.cli.common import HELP_SETTINGS, console
from labctl.cli.safeprint import outside_text, print_json
from labctl.cli.shapes import VersionOutput
from labctl.data.recipes import RECIPES

QEMU = "qemu-system-x86_64"
QEMU_TIMEOUT = 5.0  # seconds: a qemu that hangs does not hang `labctl version`
LINE_LIMIT = 200  # what qemu prints is shown, never more than a line of it


def qemu_version() -> str | None:
    """The first line `qemu-system-x86_64 --version` prints; None when it is not installed,
    what went wrong when it does not answer."""
    program = shutil.which(QEMU)
    if program is None:
        return None
    try:
        done = hostproc.run([program, "--version"], timeout=QEMU_TIMEOUT, check=False,
                            limit=64 << 10)
    except hostproc.HostProcessError as exc:
        if exc.timed_out:
            return f"no answer from {QEMU} --version in {QEMU_TIMEOUT:.0f} s"
        return f"{QEMU} --version failed: {exc.reason}"
    lines = done.stdout.splitlines()
    if done.returncode != 0 or not lines:
        return f"{QEMU} --version failed (exit {done.returncode})"
    return lines[0][:LINE_LIMIT]


def labctl_version() -> str:
    """labctl's version, from the installed package's metadata."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("labctl")
    except PackageNotFoundError:  # run from a tree that was never installed
        import labctl

        return f"{labctl.__version__} (not installed)"


def versions() -> VersionOutput:
    return {"labctl": labctl_version(), "python": platform.python_version(),
            "qemu": qemu_version(),
            "recipes": [{"name": r.name, "suite": r.suite, "kernel_suite": r.kernel_suite}
                        for r in RECIPES.values()]}


def version(
    as_json: bool = typer.Option(False, "--json", help="Print JSON (docs/json.md)."),
) -> None:
    """Show labctl's, Python's and qemu's versions, and the node image recipes."""
    found = versions()
    if as_json:
        print_json(found)
        return
    console.print(outside_text(f"labctl {found['labctl']}"))
    console.print(f"Python {found['python']}")
    qemu = found["qemu"]
    console.print(outside_text(f"qemu: {qemu if qemu is not None else 'not installed'}"),
                  soft_wrap=True)
    console.print("image recipes:")
    for r in found["recipes"]:
        console.print(f"  {r['name']}: {r['suite']} userland, kernel from {r['kernel_suite']}")


def register(app: typer.Typer) -> None:
    app.command(context_settings=HELP_SETTINGS)(version)
