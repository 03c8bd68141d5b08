"""Unpacking a tar stream that a node sent (`labctl cp NODE:SRC HOSTDIR`).

The node runs the user's code as root, so its archive is untrusted: labctl (root on the
host) must not let it plant a setuid binary, a device node or a link to /etc/passwd, write
outside the destination, or fill the host's disk or memory. What lands is what a user
expects from `docker cp` or `scp`:

- regular files, directories and symbolic links only; device files, FIFOs and sockets are
  skipped and reported (copying a tree that holds a socket should not fail the copy);
- no setuid, setgid or sticky bit, no group/other write bit, the invoking user's umask
  applied; directories and files stay readable and writable by their owner;
- owned by the user running labctl (root under sudo: root, like `sudo cp`; never chowned to
  SUDO_UID, an environment variable that is a hint, not an identity);
- every member under SRC's own name, nothing absolute, no `..` out, no link (hard or
  symbolic) that leaves the destination, and nothing written through a symbolic link;
- the sum of the files' sizes within the destination's free space, and the member count
  within its free inodes and MAX_MEMBERS (a 1 TiB member is refused before a byte of it
  is written; memory stays bounded);
- metadata records (long names, pax headers) at most 1 MiB each, sparse members refused
  (the node side, `tar -c` without -S, never makes them; their maps are unbounded).

Python's `tarfile.data_filter` (3.11.4+) does the names, links, special files, high bits
and ownership; the rest is added below where it does not reach.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from labctl.errors import LabctlError, UsageError, short_repr

METADATA_BYTES = 1 << 20  # a long name or pax header: Linux names are at most 4 KiB
# Entries in one copy: tarfile keeps each directory's header until the end (to set its
# mode last), about 0.5 KiB each; a source tree such as Linux's has under 100,000.
MAX_MEMBERS = 500_000
_METADATA_TYPES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE,
                   tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)


class RefusedArchive(LabctlError, tarfile.TarError):
    """The node's archive holds something labctl will not write on the host. A TarError so
    that tarfile passes it up unchanged; a LabctlError so that it reaches the user."""


class UnreadableArchive(LabctlError):
    """The stream is not a tar archive, or ends early: the node side may say why."""


@dataclass(frozen=True)
class Room:
    """What the destination's filesystem can take: bytes and inodes."""
    free_bytes: int
    free_inodes: int

    @classmethod
    def of(cls, path: Path) -> Room:
        info = os.statvfs(path)
        # f_files == 0: a filesystem without an inode count (btrfs): no inode limit.
        inodes = info.f_favail if info.f_files else 1 << 62
        return cls(info.f_bavail * info.f_frsize, inodes)


def _refuse(member: tarfile.TarInfo, why: str) -> RefusedArchive:
    return RefusedArchive(f"the node's archive holds {short_repr(member.name)}: {why}; "
                          "nothing was copied",
                          hint="copy a tree without it, or pack it in the node "
                          "(`labctl exec NODE -- tar -czf /root/x.tgz ...`) and copy that")


class _BoundedTarInfo(tarfile.TarInfo):
    """A header whose metadata records are bounded and whose sparse maps are refused:
    tarfile reads a pax header or long name whole into memory, whatever size it claims."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> Any:
        if self.type in _METADATA_TYPES and self.size > METADATA_BYTES:
            raise _refuse(self, f"a {self.size}-byte header record (at most {METADATA_BYTES})")
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise _refuse(self, "a sparse member")
        return super()._proc_member(tarfile_)  # type: ignore[misc]

    def _proc_gnusparse_00(self, next_: Any, pax_headers: Any, buf: Any) -> None:
        raise _refuse(next_, "a sparse member")

    def _proc_gnusparse_01(self, next_: Any, pax_headers: Any) -> None:
        raise _refuse(next_, "a sparse member")

    def _proc_gnusparse_10(self, next_: Any, pax_headers: Any, tarfile_: Any) -> None:
        raise _refuse(next_, "a sparse member")


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _parts(name: str) -> list[str]:
    return [part for part in name.split("/") if part not in ("", ".")]


def _through_symlink(dest: Path, name: str) -> bool:
    """Whether dest/name, or any directory on the way to it, is a symbolic link already
    unpacked: writing there would follow it (tarfile opens the path as it is)."""
    path = dest
    for part in _parts(name):
        path = path / part
        if path.is_symlink():
            return True
    return False


@dataclass
class HostFilter:
    """A tarfile extraction filter (member, dest) -> member | None for the node's archive."""
    top: str  # SRC's own name: every member is it or under it
    room: Room
    umask: int
    skipped: list[str] = field(default_factory=list)
    total_bytes: int = 0
    members: int = 0

    def __call__(self, member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        if member.isdev() or member.isfifo() or not (
                member.isreg() or member.isdir() or member.issym() or member.islnk()):
            self.skipped.append(member.name)
            return None
        self._check_name(member)
        filtered = tarfile.data_filter(member, dest)
        self._check_paths(member, Path(dest))
        self._count(filtered)
        if filtered.issym():  # a link's own mode means nothing on Linux
            return filtered
        return filtered.replace(mode=self._mode(member), deep=False)

    def _check_name(self, member: tarfile.TarInfo) -> None:
        parts = _parts(member.name)
        if not parts or parts[0] != self.top or ".." in parts or member.name.startswith("/"):
            raise _refuse(member, f"a name outside {short_repr(self.top)}")

    def _check_paths(self, member: tarfile.TarInfo, dest: Path) -> None:
        if member.issym():
            # Also by name (data_filter checks with realpath, which a deep enough chain
            # of links defeats): the link's target stays under SRC.
            named = posixpath.normpath(posixpath.join(posixpath.dirname(member.name),
                                                      member.linkname))
            if named != self.top and not named.startswith(self.top + "/"):
                raise _refuse(member, f"a link to {short_repr(member.linkname)}, outside "
                              "the destination")
        if _through_symlink(dest, member.name):
            raise _refuse(member, "a path through a symbolic link")
        if member.islnk():
            # os.link follows a symbolic link target: the target must be a file unpacked
            # here, reached through no link (data_filter checks with realpath, which a deep
            # enough link chain defeats).
            linked = dest.joinpath(*_parts(member.linkname))
            if _through_symlink(dest, member.linkname) or not (
                    linked.exists() and stat.S_ISREG(linked.lstat().st_mode)):
                raise _refuse(member, f"a hard link to {short_repr(member.linkname)}, "
                              "not a file in the copy")

    def _count(self, member: tarfile.TarInfo) -> None:
        self.members += 1
        if self.members > MAX_MEMBERS:
            raise _refuse(member, f"more than {MAX_MEMBERS} entries")
        if member.isreg():
            self.total_bytes += member.size
        if self.total_bytes > self.room.free_bytes:
            raise _refuse(member, f"more than the destination's {self.room.free_bytes} free "
                          "bytes")
        if self.members > self.room.free_inodes:
            raise _refuse(member, f"more than the destination's {self.room.free_inodes} free "
                          "inodes")

    def _mode(self, member: tarfile.TarInfo) -> int:
        """From the node's mode: the permission bits less group/other write (as
        data_filter), the owner's rw(x) kept, then the umask (data_filter keeps the node's
        bits as they are, and leaves directories at 0700)."""
        if member.isdir():
            return (member.mode & 0o755 | 0o700) & ~self.umask
        kept = member.mode & 0o755
        if not kept & 0o100:  # not executable by its owner: by nobody (as data_filter)
            kept &= ~0o111
        return (kept | 0o600) & ~self.umask


def _filter_error(error: tarfile.FilterError) -> RefusedArchive:
    """data_filter's refusals in labctl's words."""
    member = error.tarinfo
    why = {tarfile.AbsolutePathError: "an absolute name",
           tarfile.OutsideDestinationError: "a name outside the destination",
           tarfile.AbsoluteLinkError: f"a link to the absolute {short_repr(member.linkname)}",
           tarfile.LinkOutsideDestinationError:
               f"a link to {short_repr(member.linkname)}, outside the destination",
           tarfile.SpecialFileError: "a special file"}.get(type(error), str(error))
    return _refuse(member, why)


def _streamed(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The archive's members one by one, forgetting each: a TarFile keeps a list of every
    header it has read (0.5 KiB each: 500 MB for a million empty files)."""
    while (member := archive.next()) is not None:
        archive.members.clear()  # type: ignore[attr-defined]  # (not in typeshed)
        yield member


def unpack(stream: IO[bytes], into: Path, host_filter: HostFilter) -> None:
    """Unpack the node's tar stream into the directory `into` (a fresh, empty one: the
    caller moves the result into place). RefusedArchive or LabctlError if the stream is
    refused or unreadable; what was written stays in `into` for the caller to remove.
    The members skipped (device files, FIFOs) are in host_filter.skipped."""
    try:
        with tarfile.open(fileobj=stream, mode="r|", tarinfo=_BoundedTarInfo) as archive:
            archive.extractall(into, members=_streamed(archive), filter=host_filter)
    except tarfile.FilterError as error:
        raise _filter_error(error) from None
    except RefusedArchive:
        raise
    except (tarfile.TarError, EOFError) as error:
        raise UnreadableArchive(f"the node sent an unreadable archive: {error}",
                          hint="is the node running (`labctl status`), and is SRC readable "
                          "there?") from None
    except OSError as error:
        raise LabctlError(f"writing into {into} failed: {error.strerror or error}",
                          hint="is there room on the host, and may labctl write there?") \
            from None


def describe_skipped(names: list[str]) -> str:
    shown = ", ".join(short_repr(name) for name in names[:3])
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return (f"skipped {len(names)} device file(s), FIFO(s) or socket(s) (labctl copies files, "
            f"directories and links only): {shown}{more}")


def place(unpacked: Path, final: Path) -> None:
    """Move the unpacked SRC to `final` as cp would: a file replaces a file, a directory
    is created or merged into an existing one (entry by entry, never through a link).
    A clash (a directory against a file) is found before anything is moved."""
    _check_placing(unpacked, final)
    _move(unpacked, final)


def _is_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def refuse_special(path: Path, given: str | None = None) -> None:
    """UsageError (exit 2) if `path` is a device file, FIFO or socket: a copy never replaces
    one (`cp node1:/x /dev/null` must not turn the host's /dev/null into a file), as cp
    refuses to put a file in a directory's place."""
    try:
        mode = path.lstat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
        kind = ("a device file" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
                "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "a special file")
        shown = short_repr(given) if given is not None else str(path)
        where = "" if given is not None and Path(os.path.abspath(given)) == path else \
            f" ({path})"
        raise UsageError(f"{shown}{where} is {kind}; labctl cp replaces only files, "
                         "directories and links", hint="choose another DST")


def _check_placing(unpacked: Path, final: Path) -> None:
    if not os.path.lexists(final):
        return
    refuse_special(final)
    if not _is_dir(final):
        if _is_dir(unpacked):
            raise LabctlError(f"{final} is a file; the node's copy is a directory",
                              hint="choose another DST")
        return
    if not _is_dir(unpacked):
        raise LabctlError(f"{final} is a directory; the node's copy is not",
                          hint="choose another DST")
    for entry in os.listdir(unpacked):
        _check_placing(unpacked / entry, final / entry)


def _move(unpacked: Path, final: Path) -> None:
    if _is_dir(final) and _is_dir(unpacked):
        for entry in sorted(os.listdir(unpacked)):
            _move(unpacked / entry, final / entry)
    else:
        os.replace(unpacked, final)


def top_name(node_path: str) -> str:
    return posixpath.basename(node_path.rstrip("/") or "/")
