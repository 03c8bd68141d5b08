"""The workbench keys of a topology: `packages:` (Debian packages added to the node image)
and `mounts:` (host folders in the nodes, "SRC:DST" or "SRC:DST:ro"). Their syntax is
checked here, for the topology model and for `labctl up --mount` alike; a mount's source
is found on the host later (`resolve_source`), relative to the topology file's directory
(or, for --mount, the working directory)."""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass, replace
from pathlib import Path

from labctl.errors import UsageError, short_repr
from labctl.nodeside import NODE_CODE
from labctl.topology.host import FLAG, allowed, refusal
from labctl.topology.resolved import Lab, Mount

# Debian policy 5.6.1: lowercase letters, digits, '+', '-', '.'; at least two characters,
# starting with a letter or digit. The length bound is ours (no real name comes close).
PACKAGE_RE = r"^[a-z0-9][a-z0-9+.-]{1,99}$"
MAX_PACKAGES = 200
MAX_MOUNTS = 16
# Inside the node: an absolute, normalized path of plain characters. The node's init and
# qemu's -virtfs options both see it, so nothing that needs quoting there is allowed.
_TARGET_RE = re.compile(r"^(/[A-Za-z0-9._+@-]+)+$")
# A mount there would hide what the node itself needs (its system, labctl's code, ssh).
RESERVED_TREES = ("/proc", "/sys", "/dev", "/run", "/etc", "/usr", "/bin", "/sbin", "/lib",
                  "/lib64", "/boot", NODE_CODE, "/root/.ssh")
RESERVED_EXACT = ("/root", "/tmp", "/var", "/opt", "/home", "/srv", "/mnt", "/media")
MODES = ("ro", "rw")
MOUNT_HINT = ("write a mount as SRC:DST or SRC:DST:ro, e.g. ./src:/work or ./data:/data:ro "
              "(SRC relative to the topology file's directory, DST an absolute path in the "
              "node)")


class WorkbenchValueError(ValueError):
    """A bad package name or mount: the message and the hint the user sees."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class MountSpec:
    """A mount as written: the source still unresolved."""

    source: str
    target: str
    readonly: bool


def check_package(name: object) -> str:
    if not isinstance(name, str) or not re.fullmatch(PACKAGE_RE, name):
        raise WorkbenchValueError(
            f"{short_repr(name)} is not a Debian package name",
            "package names are lowercase letters, digits, '+', '-' and '.', at least two "
            "characters, starting with a letter or digit (e.g. libibverbs-dev); no versions",
        )
    return name


def check_target(target: str) -> str:
    if not target.startswith("/"):
        raise WorkbenchValueError(
            f"the node path {short_repr(target)} is not absolute", MOUNT_HINT)
    if (not _TARGET_RE.fullmatch(target) or posixpath.normpath(target) != target
            or any(part in (".", "..") for part in target.split("/"))):
        raise WorkbenchValueError(
            f"the node path {short_repr(target)} must be a normalized absolute path of "
            "letters, digits and . _ + @ -",
            "e.g. /work or /home/user/src (no '..', no trailing '/', no spaces)")
    if target in RESERVED_EXACT or any(
            target == tree or target.startswith(tree + "/") for tree in RESERVED_TREES):
        raise WorkbenchValueError(
            f"{target} is reserved in the node (mounting there would hide what the node "
            "needs)",
            "mount under another path, e.g. /work, /data or /root/src")
    return target


def parse_mount(text: object) -> MountSpec:
    """"SRC:DST" or "SRC:DST:ro" (":rw" also accepted). SRC may hold colons itself: DST,
    which may not, is the part after the last one (or the one before ":ro"/":rw")."""
    if not isinstance(text, str):
        raise WorkbenchValueError(f"a mount must be a string (got {short_repr(text)})",
                                  MOUNT_HINT)
    if any(ch in text for ch in "\0\n\r"):
        raise WorkbenchValueError(f"{short_repr(text)} holds a control character", MOUNT_HINT)
    body, readonly = text, False
    head, sep, mode = text.rpartition(":")
    if sep and mode in MODES:
        body, readonly = head, mode == "ro"
    source, sep, target = body.rpartition(":")
    if not sep or not source or not target:
        raise WorkbenchValueError(f"{short_repr(text)} is not SRC:DST or SRC:DST:ro",
                                  MOUNT_HINT)
    return MountSpec(source, check_target(target), readonly)


def resolve_source(source: str, base: Path, allowances: tuple[Path, ...] = ()) -> str:
    """The mount source as an absolute host path, symlinks and `..` resolved (relative
    ones from `base`); it must be an existing directory, and not one of the host's own
    (host.refusal) unless the command line allowed it."""
    path = Path(os.path.expanduser(source))
    if not path.is_absolute():
        path = base / path
    path = Path(os.path.normpath(path.absolute()))
    try:
        return _resolved_source(path, source, allowances)
    except OSError as exc:  # /proc/1/root/... (EACCES), a name past 255 bytes, a link loop
        raise WorkbenchValueError(
            f"cannot look at the host folder {short_repr(source)} ({exc.strerror or exc})",
            "give a folder of your own, by a path of at most 4,096 characters with names of "
            "at most 255 bytes") from None


def _resolved_source(path: Path, source: str, allowances: tuple[Path, ...]) -> str:
    # Named as written: the message reads the same wherever the file lives.
    if not path.exists():
        raise WorkbenchValueError(
            f"the host folder {short_repr(source)} does not exist",
            "create it, or fix SRC (a relative SRC starts from the topology file's directory; "
            "for `labctl up --mount`, from the working directory)")
    if not path.is_dir():
        raise WorkbenchValueError(
            f"the host path {short_repr(source)} is not a directory",
            "mounts share folders: put the file in a directory and mount that")
    # What the node gets is where the links lead: a link to /etc is /etc.
    resolved = Path(os.path.realpath(path))
    why = refusal(resolved)
    if why is not None and not allowed(resolved, allowances):
        shown = "" if str(resolved) == source else f" ({resolved})"
        raise WorkbenchValueError(
            f"the host folder {short_repr(source)}{shown} is {why}; a node runs code as root "
            "and would reach the host's files there",
            f"mount a project folder instead; to share this one anyway, say so on the "
            f"command line: {FLAG} {resolved}")
    return str(resolved)


def with_extra_mounts(lab: Lab, texts: tuple[str, ...], base: Path,
                      allowances: tuple[Path, ...] = ()) -> Lab:
    """`lab` with `labctl up --mount` folders added to every node (sources from `base`);
    UsageError (exit 2) on a bad one or a node path a node already mounts."""
    if not texts:
        return lab
    extra: list[Mount] = []
    for text in texts:
        try:
            spec = parse_mount(text)
            extra.append(Mount(resolve_source(spec.source, base, allowances), spec.target,
                                   spec.readonly))
        except WorkbenchValueError as exc:
            raise UsageError(f"--mount {short_repr(text)}: {exc.message}", hint=exc.hint) from None
    nodes = []
    for node in lab.nodes:
        taken = {m.target for m in node.mounts}
        for mount in extra:
            if mount.target in taken:
                raise UsageError(f"--mount {mount.text}: node {node.name} already mounts a "
                                 f"folder at {mount.target}", hint="choose another DST")
            taken.add(mount.target)
        if len(taken) > MAX_MOUNTS:
            raise UsageError(f"node {node.name} would have {len(taken)} mounts (at most "
                             f"{MAX_MOUNTS})", hint="mount a common parent folder instead")
        nodes.append(replace(node, mounts=(*node.mounts, *extra)))
    return replace(lab, nodes=tuple(nodes))
