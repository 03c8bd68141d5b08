"""Files under a directory labctl owns (a lab directory, the image cache), never through a link.

labctl runs as root, and what lies in a lab directory or the image cache is data: a lab
directory restored from elsewhere, or a node that wrote into a shared folder, may hold a
symbolic link where labctl expects its own file. Opening such a path as it is would make
labctl write, truncate or read whatever the link names on the host. So every path here is
opened from `root` down, one component at a time, relative to its parent's descriptor and
with O_NOFOLLOW: a link anywhere below `root` is never followed.

What labctl (re)makes (logs, boot copies, an initrd, lock files) replaces whatever is in
its place (a link or a FIFO is removed, never followed); what labctl only reads or hands on
(an ssh key, a control socket) must be what labctl made, else `NotLabctls`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from labctl.errors import LabctlError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_COPY_CHUNK = 1 << 20


class NotLabctls(LabctlError):
    """A path under a lab directory or the cache is not what labctl made there."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path}: {why}; labctl does not follow links or use files it did "
                         "not make there",
                         hint="remove it (`labctl down` removes a lab whole), then try again")
        self.path = path


def _parts(path: Path, root: Path) -> list[str]:
    try:
        relative = path.relative_to(root)
    except ValueError:
        raise NotLabctls(path, f"not under {root}") from None
    parts = list(relative.parts)
    if any(part in ("..", ".") for part in parts):
        raise NotLabctls(path, f"not under {root}")
    return parts


def _open_root(root: Path) -> int:
    """`root` itself is the caller's to trust (a lab directory LabDir checked, the cache
    folder the user chose, which may well be a link to a bigger disk)."""
    try:
        return os.open(root, _DIR_FLAGS & ~os.O_NOFOLLOW)
    except OSError as exc:
        raise _why(root, exc) from None


def _why(path: Path, exc: OSError) -> Exception:
    if exc.errno == errno.ENOENT:
        return exc
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return NotLabctls(path, "a symbolic link, or a file where a directory belongs")
    return LabctlError(f"{path}: {exc.strerror or exc}",
                       hint="may labctl write there, and is there room?")


@contextlib.contextmanager
def parent_fd(path: Path, root: Path, *, make: bool = False,
              mode: int = 0o750) -> Iterator[int]:
    """A descriptor of `path`'s parent directory, reached from `root` without following a
    link; with make=True, missing directories on the way are made (mode)."""
    parts = _parts(path, root)
    if not parts:
        raise NotLabctls(path, "is the directory itself")
    fd = _open_root(root)
    try:
        here = root
        for part in parts[:-1]:
            here = here / part
            if make:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, mode, dir_fd=fd)
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _why(here, exc) from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def make_dirs(path: Path, root: Path, mode: int = 0o750) -> None:
    """`path` and the directories on the way from `root`, made where missing; refuses a
    link or a file where a directory belongs."""
    if path == root:
        os.close(_open_root(root))
        return
    with parent_fd(path, root, make=True, mode=mode) as fd:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path.name, mode, dir_fd=fd)
        try:
            os.close(os.open(path.name, _DIR_FLAGS, dir_fd=fd))
        except OSError as exc:
            raise _why(path, exc) from None


def _check_regular(fd: int, path: Path) -> int:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotLabctls(path, "not a regular file")
    return fd


def open_existing(path: Path, root: Path, flags: int = os.O_RDONLY) -> int:
    """A descriptor of the regular file `path` (FileNotFoundError if it is missing);
    NotLabctls if it, or a directory on the way, is a link or not a regular file."""
    with parent_fd(path, root) as fd:
        try:
            opened = os.open(path.name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                             dir_fd=fd)
        except FileNotFoundError:
            raise
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                raise NotLabctls(path, "a link or not a regular file") from None
            raise _why(path, exc) from None
    return _check_regular(opened, path)


def _remove_in(fd: int, name: str, path: Path) -> None:
    """Remove what is at `name` (never what a link names); a directory is refused."""
    try:
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        raise NotLabctls(path, "a directory where labctl keeps a file")
    os.unlink(name, dir_fd=fd)


def create(path: Path, root: Path, mode: int = 0o600, *, append: bool = False,
           make_parents: bool = True) -> int:
    """A descriptor for writing a file labctl makes at `path`: a new empty one (whatever was
    there, a link or FIFO included, is removed first, never followed), or with append=True
    the regular file there opened for appending (anything else there is replaced)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    with parent_fd(path, root, make=make_parents) as fd:
        if append:
            with contextlib.suppress(OSError):
                opened = os.open(path.name, flags | os.O_APPEND | os.O_NONBLOCK, mode,
                                 dir_fd=fd)
                if stat.S_ISREG(os.fstat(opened).st_mode):
                    os.set_blocking(opened, True)
                    return opened
                os.close(opened)
        _remove_in(fd, path.name, path)
        try:
            return os.open(path.name, flags | os.O_EXCL, mode, dir_fd=fd)
        except OSError as exc:
            raise _why(path, exc) from None


def write_bytes(path: Path, data: bytes, root: Path, mode: int = 0o600) -> None:
    """`path` holds `data` (a new file renamed into place: a link there is replaced)."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.new")
    fd = create(temp, root, mode)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        replace(temp, path, root)
    except BaseException:
        unlink(temp, root)
        raise


def copy_file(source: Path, path: Path, root: Path, mode: int = 0o600,
              source_root: Path | None = None) -> None:
    """A copy of the regular file `source` at `path` (renamed into place). `source` is
    opened without following a link too when `source_root` is given."""
    if source_root is not None:
        src_fd = open_existing(source, source_root)
        if os.fstat(src_fd).st_nlink != 1:  # a second name of a host file is not labctl's
            os.close(src_fd)
            raise NotLabctls(source, "a file with more than one hard link")
    else:
        src_fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        _check_regular(src_fd, source)
    temp = path.with_name(f".{path.name}.{os.getpid()}.new")
    try:
        fd = create(temp, root, mode)
        try:
            with os.fdopen(fd, "wb") as out:
                while chunk := os.read(src_fd, _COPY_CHUNK):
                    out.write(chunk)
            replace(temp, path, root)
        except BaseException:
            unlink(temp, root)
            raise
    finally:
        os.close(src_fd)


def replace(source: Path, target: Path, root: Path) -> None:
    """Rename `source` to `target`, both in one directory under `root` (a link at `target`
    is replaced, never followed)."""
    if source.parent != target.parent:
        raise ValueError("replace() renames within one directory")
    with parent_fd(target, root) as fd:
        os.replace(source.name, target.name, src_dir_fd=fd, dst_dir_fd=fd)


def unlink(path: Path, root: Path) -> None:
    """Remove the file, link or socket at `path` if there is one (directories stay)."""
    with contextlib.suppress(FileNotFoundError, NotLabctls, IsADirectoryError,
                             PermissionError), parent_fd(path, root) as fd:
        os.unlink(path.name, dir_fd=fd)


def truncate(path: Path, root: Path) -> None:
    """Empty the regular file at `path`; nothing (and nothing followed) for anything else."""
    with contextlib.suppress(FileNotFoundError, NotLabctls):
        fd = open_existing(path, root, os.O_WRONLY)
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)


def lstat_beneath(path: Path, root: Path) -> os.stat_result:
    """`path`'s own stat (a link's, not its target's), reached without following a link
    on the way: FileNotFoundError when missing, NotLabctls for a link on the way."""
    with parent_fd(path, root) as fd:
        return os.stat(path.name, dir_fd=fd, follow_symlinks=False)


def read_bytes(path: Path, root: Path, limit: int) -> bytes:
    """The regular file `path`, if it has one name only (a hard link to a host file, such
    as /etc/shadow, is not labctl's) and at most `limit` bytes; else NotLabctls."""
    fd = open_existing(path, root)
    try:
        info = os.fstat(fd)
        if info.st_nlink != 1:
            raise NotLabctls(path, f"a file with {info.st_nlink} hard links")
        if info.st_size > limit:
            raise NotLabctls(path, f"{info.st_size} bytes, more than the {limit} expected")
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read(limit + 1)[:limit]
    finally:
        os.close(fd)
