"""The `kernel:` key of a topology (and `labctl up --kernel`): which kernel a qemu node
boots. `image` (the default) is the node image's own Debian kernel; anything else is a
host path, relative to the topology file's directory (for --kernel, the working
directory): a kernel build tree after `make`, or a folder laid out as
`make modules_install INSTALL_MOD_PATH=DIR` leaves it plus the kernel. What the path holds
is read later, before anything boots (labctl.images.kernels)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from labctl.errors import UsageError, short_repr
from labctl.topology.resolved import Lab
from labctl.topology.workbench import WorkbenchValueError

IMAGE_KERNEL = "image"
MAX_KERNEL_PATH = 4096
KERNEL_HINT = ("kernel: image (the node image's own kernel), or the path of a kernel build "
               "tree after `make`, or of a folder made by `make modules_install "
               "INSTALL_MOD_PATH=DIR` holding the bzImage or vmlinuz too (docs/kernel.md)")


def check_kernel(text: object) -> str:
    """The value's syntax: `image` or a path of plain text."""
    if not isinstance(text, str) or not text:
        raise WorkbenchValueError(f"a kernel must be a non-empty string (got "
                                  f"{short_repr(text)})", KERNEL_HINT)
    if any(ch in text for ch in "\0\n\r"):
        raise WorkbenchValueError(f"{short_repr(text)} holds a control character",
                                  KERNEL_HINT)
    if len(text) > MAX_KERNEL_PATH:
        raise WorkbenchValueError(f"the kernel path is longer than {MAX_KERNEL_PATH} "
                                  "characters", KERNEL_HINT)
    if text.startswith("debian:"):
        raise WorkbenchValueError(
            f"{short_repr(text)}: Debian kernel packages by version are not supported yet",
            "extract the package into a folder and give its path: `apt-get download "
            "linux-image-VERSION-amd64 && dpkg -x linux-image-*.deb DIR` (docs/kernel.md)")
    return text


def resolve_kernel(text: str, base: Path) -> str:
    """`image`, or the kernel's path made absolute (from `base`), normalized, and checked
    to exist as a folder or a file."""
    if text == IMAGE_KERNEL:
        return text
    path = Path(os.path.expanduser(text))
    if not path.is_absolute():
        path = base / path
    path = Path(os.path.normpath(path.absolute()))
    try:
        exists, is_dir = path.exists(), path.is_dir()
    except OSError as exc:
        raise WorkbenchValueError(f"cannot look at the kernel {short_repr(text)} "
                                  f"({exc.strerror or exc})", KERNEL_HINT) from None
    if not exists:
        raise WorkbenchValueError(
            f"the kernel {short_repr(text)} does not exist",
            "give the path of a kernel build tree or folder (a relative path starts from the "
            "topology file's directory; for `labctl up --kernel`, from the working directory)")
    if not is_dir:
        raise WorkbenchValueError(
            f"the kernel {short_repr(text)} is a file; labctl needs the kernel's modules and "
            "configuration beside it",
            "give the kernel build tree (with arch/x86/boot/bzImage), or a folder made by "
            "`make modules_install INSTALL_MOD_PATH=DIR` with the bzImage or vmlinuz in it")
    return str(path)


def with_kernel(lab: Lab, text: str, base: Path) -> Lab:
    """`lab` with every node on the kernel `labctl up --kernel` names (a path from `base`);
    UsageError (exit 2) on a bad one."""
    try:
        kernel = resolve_kernel(check_kernel(text), base)
    except WorkbenchValueError as exc:
        raise UsageError(f"--kernel {short_repr(text)}: {exc.message}", hint=exc.hint) from None
    return replace(lab, nodes=tuple(replace(n, kernel=kernel) for n in lab.nodes))
