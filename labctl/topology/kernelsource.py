"""The `kernel:` key of a topology (and `labctl up --kernel`): which kernel a qemu node
boots. `image` (the default) is the node image's own Debian kernel; anything else is a
host path, relative to the topology file's directory (for --kernel, the working
directory): a kernel build tree after `make`, or a folder laid out as
`make modules_install INSTALL_MOD_PATH=DIR` leaves it plus the kernel. What the path holds
is read later, before anything boots (labctl.images.kernels)."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

from labctl.errors import UsageError, short_repr
from labctl.topology.resolved import Lab
from labctl.topology.workbench import WorkbenchValueError

IMAGE_KERNEL = "image"
DEBIAN_PREFIX = "debian:"
# debian:VERSION reaches apt: digits, dots and Debian's own suffixes only
DEBIAN_VERSION_RE = re.compile(r"^[0-9]{1,2}\.[0-9]{1,3}(\.[0-9]{1,4})?(-[0-9]{1,3})?"
                               r"(\+deb[0-9]{1,3})?(-amd64)?$")
DEBIAN_HINT = ("debian:SERIES (debian:6.12), debian:VERSION (debian:6.12.57) or a release "
               "as `uname -r` says it (debian:6.12.57+deb13-amd64): a kernel package of the "
               "node image's apt sources (docs/kernel.md)")
MAX_KERNEL_PATH = 4096
KERNEL_HINT = ("kernel: image (the node image's own kernel), debian:VERSION (a Debian "
               "kernel package), or the path of a kernel build "
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
    if text.startswith(DEBIAN_PREFIX):
        version = text.removeprefix(DEBIAN_PREFIX)
        if not DEBIAN_VERSION_RE.fullmatch(version):
            raise WorkbenchValueError(f"{short_repr(text)} is not a Debian kernel version",
                                      DEBIAN_HINT)
    return text


def resolve_kernel(text: str, base: Path) -> str:
    """`image`, or the kernel's path made absolute (from `base`), normalized, and checked
    to exist as a folder or a file."""
    if text == IMAGE_KERNEL or text.startswith(DEBIAN_PREFIX):
        return text  # a Debian kernel is fetched when the lab is made (debian_kernels)
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
