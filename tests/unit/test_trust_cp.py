"""`labctl cp NODE:SRC HOSTDIR` treats the node's tar stream as untrusted (issue 35, item 1):
hostile archives built here go through copy_from_node(), the CLI's own path, with the
node's side replaced by `cat ARCHIVE` (or the real node script run on a local tree), and
the test looks at what landed: modes, owners, and nothing outside the destination."""

from __future__ import annotations

import io
import os
import socket
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from labctl.cli import cp as cli_cp
from labctl.errors import LabctlError, UsageError
from labctl.lab.transfer import CopyRequest, copy_from_node
from labctl.lab.unpack import METADATA_BYTES, HostFilter, Room, unpack
from labctl.lab.unpack import _streamed as unpack_members
from tests.unit.clirun import run_main

PLENTY = Room(free_bytes=1 << 40, free_inodes=1 << 30)


class _Node:
    """The node's exec channel: every command runs `producer` on the host instead."""

    def __init__(self, producer: list[str]) -> None:
        self.producer = producer

    def argv(self, node: str, command: list[str], *, tty: bool = False) -> list[str]:
        return self.producer


class _Local:
    """The node's exec channel as the host itself: the real node-side script runs here."""

    def argv(self, node: str, command: list[str], *, tty: bool = False) -> list[str]:
        return command


Member = tuple[tarfile.TarInfo, bytes]


def _info(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, size: int = 0,
          link: str = "", uid: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.linkname = kind, mode, size, link
    info.uid = info.gid = uid
    info.uname = info.gname = "root" if uid == 0 else ""
    return info


def _file(name: str, mode: int = 0o644, data: bytes = b"x\n") -> Member:
    return _info(name, mode=mode, size=len(data)), data


def _dir(name: str, mode: int = 0o755) -> Member:
    return _info(name, tarfile.DIRTYPE, mode), b""


def _archive(path: Path, members: list[Member]) -> Path:
    """The raw stream, header by header: a member may claim more bytes than follow it."""
    with path.open("wb") as out:
        for info, data in members:
            out.write(info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape"))
            out.write(data + bytes(-len(data) % tarfile.BLOCKSIZE))
        out.write(bytes(2 * tarfile.BLOCKSIZE))
    return path


def _copy(tmp_path: Path, members: list[Member], top: str = "out",
          room: Room = PLENTY, dest: str = "dest") -> Path:
    archive = _archive(tmp_path / "node.tar", members)
    (tmp_path / dest).mkdir(exist_ok=True)
    request = CopyRequest("node1", f"/root/{top}", str(tmp_path / dest), to_node=False)
    landed, _ = copy_from_node(_Node(["cat", str(archive)]), request, 30,  # type: ignore[arg-type]
                               room=room)
    return Path(landed)


def _outside(tmp_path: Path) -> set[str]:
    """Everything under tmp_path except the archive and the destination."""
    return {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")
            if p.name != "node.tar" and not str(p.relative_to(tmp_path)).startswith("dest")}


@pytest.fixture(autouse=True)
def _umask_022() -> object:
    old = os.umask(0o022)
    yield
    os.umask(old)


# ------------------------------------------------------------------ modes and ownership

# (what the node sends, the host path under dest/out, its expected permission bits)
MODES: list[tuple[str, list[Member], str, int]] = [
    ("setuid root file", [_dir("out"), _file("out/su", 0o4755)], "su", 0o755),
    ("setgid file", [_dir("out"), _file("out/sg", 0o2755)], "sg", 0o755),
    ("setuid+setgid+sticky", [_dir("out"), _file("out/all", 0o7777)], "all", 0o755),
    ("world-writable file", [_dir("out"), _file("out/ww", 0o666)], "ww", 0o644),
    ("unreadable file", [_dir("out"), _file("out/none", 0o000)], "none", 0o600),
    ("setgid dir", [_dir("out"), _dir("out/sgd", 0o2775)], "sgd", 0o755),
    ("sticky 0777 dir", [_dir("out"), _dir("out/tmp", 0o1777)], "tmp", 0o755),
    ("0777 dir", [_dir("out", 0o777)], "", 0o755),
    ("0000 dir", [_dir("out", 0o000), _file("out/f")], "", 0o700),
    ("group-exec only", [_dir("out"), _file("out/gx", 0o654)], "gx", 0o644),
]


@pytest.mark.parametrize(("members", "where", "mode"), [m[1:] for m in MODES],
                         ids=[m[0] for m in MODES])
def test_modes_lose_high_bits_and_take_the_umask(
        tmp_path: Path, members: list[Member], where: str, mode: int) -> None:
    landed = _copy(tmp_path, members)
    path = landed / where if where else landed
    info = path.lstat()
    assert stat.S_IMODE(info.st_mode) == mode
    assert (info.st_uid, info.st_gid) == (os.geteuid(), os.getegid())


def test_umask_077_is_applied(tmp_path: Path) -> None:
    os.umask(0o077)
    landed = _copy(tmp_path, [_dir("out", 0o755), _file("out/f", 0o755)])
    assert stat.S_IMODE(landed.stat().st_mode) == 0o700
    assert stat.S_IMODE((landed / "f").stat().st_mode) == 0o700


def test_owner_is_the_host_user_not_the_nodes(tmp_path: Path) -> None:
    landed = _copy(tmp_path, [_dir("out"), (_info("out/f", size=1, uid=4242), b"x")])
    assert (landed / "f").stat().st_uid == os.geteuid()


def test_sudo_uid_is_not_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUDO_UID", "4242")
    monkeypatch.setenv("SUDO_GID", "4242")
    landed = _copy(tmp_path, [_dir("out"), _file("out/f")])
    assert (landed / "f").stat().st_uid == os.geteuid()


# ------------------------------------------------------------------ special files: skipped

SPECIAL: list[tuple[str, Member]] = [
    ("char device", (_info("out/null", tarfile.CHRTYPE, 0o666), b"")),
    ("block device", (_info("out/sda", tarfile.BLKTYPE, 0o660), b"")),
    ("fifo", (_info("out/pipe", tarfile.FIFOTYPE, 0o644), b"")),
    ("setuid char device", (_info("out/mem", tarfile.CHRTYPE, 0o4777), b"")),
]


@pytest.mark.parametrize("member", [s[1] for s in SPECIAL], ids=[s[0] for s in SPECIAL])
def test_special_files_are_skipped_and_reported(tmp_path: Path, member: Member) -> None:
    archive = _archive(tmp_path / "node.tar", [_dir("out"), member, _file("out/kept")])
    (tmp_path / "dest").mkdir()
    request = CopyRequest("node1", "/root/out", str(tmp_path / "dest"), to_node=False)
    landed, skipped = copy_from_node(_Node(["cat", str(archive)]), request,  # type: ignore[arg-type]
                                     30, room=PLENTY)
    assert sorted(p.name for p in Path(landed).iterdir()) == ["kept"]
    assert skipped == ("skipped 1 device file(s), FIFO(s) or socket(s) (labctl copies files, "
                       f"directories and links only): {member[0].name!r}")


def test_the_cli_says_what_it_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    specials = [(_info(f"out/d{i}", tarfile.CHRTYPE), b"") for i in range(5)]
    archive = _archive(tmp_path / "node.tar", [_dir("out"), *specials])
    monkeypatch.setattr(cli_cp, "open_lab", lambda lab: _Node(["cat", str(archive)]))
    code, out, err = run_main(monkeypatch, capsys, "cp", "node1:/root/out", str(tmp_path))
    assert code == 0
    assert out == f"copied node1:/root/out -> {tmp_path}/out\n"
    assert err == ("labctl cp: skipped 5 device file(s), FIFO(s) or socket(s) (labctl copies "
                   "files, directories and links only): 'out/d0', 'out/d1', 'out/d2' and 2 "
                   "more\n")


# ------------------------------------------------------------------ refused: nothing lands

REFUSED: list[tuple[str, list[Member], str]] = [
    ("hard link to /etc/passwd", [_dir("out"), (_info("out/pw", tarfile.LNKTYPE,
                                                      link="/etc/passwd"), b"")],
     "the node's archive holds 'out/pw': a link to the absolute '/etc/passwd'"),
    ("symlink out of SRC by name", [_dir("out"), _dir("out/d"),
                                    (_info("out/d/l", tarfile.SYMTYPE, link="../../x"), b"")],
     "the node's archive holds 'out/d/l': a link to '../../x', outside the destination"),
    ("hard link via ..", [_dir("out"), (_info("out/pw", tarfile.LNKTYPE,
                                              link="../../../../etc/passwd"), b"")],
     "the node's archive holds 'out/pw': a link to '../../../../etc/passwd', outside the "
     "destination"),
    ("symlink to /etc", [_dir("out"), (_info("out/etc", tarfile.SYMTYPE, link="/etc"), b"")],
     "the node's archive holds 'out/etc': a link to the absolute '/etc'"),
    ("symlink escaping by ..", [_dir("out"), (_info("out/up", tarfile.SYMTYPE,
                                                    link="../../.."), b"")],
     "the node's archive holds 'out/up': a link to '../../..', outside the destination"),
    ("write through an inner symlink",
     [_dir("out"), _dir("out/real"), (_info("out/l", tarfile.SYMTYPE, link="real"), b""),
      _file("out/l/f")],
     "the node's archive holds 'out/l/f': a path through a symbolic link"),
    ("overwrite a symlink", [_dir("out"), _file("out/t"),
                             (_info("out/l", tarfile.SYMTYPE, link="t"), b""),
                             _file("out/l")],
     "the node's archive holds 'out/l': a path through a symbolic link"),
    ("hard link through a symlink",
     [_dir("out"), _file("out/t"), (_info("out/l", tarfile.SYMTYPE, link="t"), b""),
      (_info("out/h", tarfile.LNKTYPE, link="out/l"), b"")],
     "the node's archive holds 'out/h': a hard link to 'out/l', not a file in the copy"),
    ("absolute name", [_file("/etc/cron.d/x")],
     "the node's archive holds '/etc/cron.d/x': a name outside 'out'"),
    ("dot-dot name", [_dir("out"), _file("out/../../escape")],
     "the node's archive holds 'out/../../escape': a name outside 'out'"),
    ("another top name", [_file("other")],
     "the node's archive holds 'other': a name outside 'out'"),
    ("huge member", [_dir("out"), (_info("out/big", size=1 << 40), b"")],
     "the node's archive holds 'out/big': more than the destination's 1048576 free bytes"),
]


@pytest.mark.parametrize(("members", "message"), [r[1:] for r in REFUSED],
                         ids=[r[0] for r in REFUSED])
def test_hostile_members_are_refused_and_nothing_lands(
        tmp_path: Path, members: list[Member], message: str) -> None:
    room = Room(free_bytes=1 << 20, free_inodes=1000)
    archive = _archive(tmp_path / "node.tar", members)
    (tmp_path / "dest").mkdir()
    request = CopyRequest("node1", "/root/out", str(tmp_path / "dest"), to_node=False)
    with pytest.raises(LabctlError) as info:
        copy_from_node(_Node(["cat", str(archive)]), request, 30,  # type: ignore[arg-type]
                       room=room)
    assert info.value.message == message + "; nothing was copied"
    assert info.value.exit_code == 1
    assert list((tmp_path / "dest").iterdir()) == []
    assert _outside(tmp_path) == set()


def test_too_many_members_for_the_free_inodes(tmp_path: Path) -> None:
    members = [_dir("out")] + [_file(f"out/{i}") for i in range(5)]
    with pytest.raises(LabctlError, match="more than the destination's 3 free inodes"):
        _copy(tmp_path, members, room=Room(1 << 30, 3))
    assert list((tmp_path / "dest").iterdir()) == []


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME])
def test_huge_metadata_records_are_refused_before_being_read(kind: bytes) -> None:
    header = _info("out/x", kind, size=METADATA_BYTES + 1).tobuf(tarfile.USTAR_FORMAT)
    stream = io.BytesIO(header)  # the record's body is never sent: it must not be awaited
    with pytest.raises(LabctlError, match=f"a {METADATA_BYTES + 1}-byte header record"):
        unpack(stream, Path("/nonexistent"), HostFilter("out", PLENTY, 0o022))


def test_sparse_members_are_refused(tmp_path: Path) -> None:
    header = _info("out/s", tarfile.GNUTYPE_SPARSE, size=0).tobuf(tarfile.GNU_FORMAT)
    with pytest.raises(LabctlError, match="'out/s': a sparse member"):
        unpack(io.BytesIO(header + bytes(1024)), tmp_path, HostFilter("out", PLENTY, 0))


def test_garbage_and_truncated_streams_are_a_message(tmp_path: Path) -> None:
    whole = _archive(tmp_path / "t.tar", [_dir("out"), _file("out/f", data=b"y" * 5000)])
    for stream in (b"not a tar at all" * 100, whole.read_bytes()[:1500]):
        with pytest.raises(LabctlError, match="the node sent an unreadable archive"):
            unpack(io.BytesIO(stream), tmp_path / "d", HostFilter("out", PLENTY, 0))


# ------------------------------------------------------------------ the ordinary copy still works

def _local_node_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "node" / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("a\n")
    (tree / "sub" / "run.sh").write_text("#!/bin/sh\n")
    (tree / "sub" / "run.sh").chmod(0o4755)
    (tree / "link").symlink_to("a.txt")
    os.link(tree / "a.txt", tree / "hard")
    return tree


def test_the_node_script_and_the_filter_copy_a_real_tree(tmp_path: Path) -> None:
    """The real `_PACK` script, run here on a local tree, through the CLI's path."""
    tree = _local_node_tree(tmp_path)
    dest = tmp_path / "dest"
    dest.mkdir()
    request = CopyRequest("node1", str(tree), str(dest), to_node=False)
    node = _Local()
    copy_from_node(node, request, 30, room=PLENTY)  # type: ignore[arg-type]
    copy_from_node(node, request, 30, room=PLENTY)  # type: ignore[arg-type]  # again: merged into the existing copy
    got = dest / "tree"
    assert (got / "a.txt").read_text() == "a\n"
    assert os.readlink(got / "link") == "a.txt"
    assert (got / "hard").stat().st_ino == (got / "a.txt").stat().st_ino
    assert stat.S_IMODE((got / "sub" / "run.sh").stat().st_mode) == 0o755
    assert [p.name for p in dest.iterdir()] == ["tree"]  # no temporary directory left


def test_a_missing_source_keeps_the_node_scripts_message(tmp_path: Path) -> None:
    request = CopyRequest("node1", str(tmp_path / "no-such"), str(tmp_path), to_node=False)
    node = _Local()
    with pytest.raises(LabctlError) as info:
        copy_from_node(node, request, 30, room=PLENTY)  # type: ignore[arg-type]
    assert info.value.exit_code == 2
    assert info.value.message.endswith("no-such: no such file or directory in the node")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_node_that_never_ends_times_out(tmp_path: Path) -> None:
    request = CopyRequest("node1", "/root/out", str(tmp_path), to_node=False)
    with pytest.raises(LabctlError, match="the copy did not finish in 1 s"):
        copy_from_node(_Node(["sleep", "30"]), request, 1, room=PLENTY)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_too_many_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from labctl.lab import unpack as unpack_module

    monkeypatch.setattr(unpack_module, "MAX_MEMBERS", 3)
    members = [_dir("out")] + [_dir(f"out/{i}") for i in range(5)]
    with pytest.raises(LabctlError, match="'out/2': more than 3 entries; nothing was copied"):
        _copy(tmp_path, members)
    assert list((tmp_path / "dest").iterdir()) == []


def test_headers_are_not_kept(tmp_path: Path) -> None:
    """The stream's headers are forgotten as they go (memory bounded by the member
    count only through the directories tarfile keeps for their modes)."""
    archive = _archive(tmp_path / "node.tar", [_dir("out")] + [_file(f"out/{i}")
                                                               for i in range(50)])
    with archive.open("rb") as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
        seen = 0
        for _ in unpack_members(tar):
            seen += 1
            assert getattr(tar, "members") == []  # noqa: B009 (not in typeshed)
    assert seen == 51


def _sh(script: str, archive: Path | None = None) -> _Node:
    return _Node(["sh", "-c", script, "sh", str(archive or "/dev/null")])


NODE_ENDS = [
    ("garbage, exit 0", "echo garbage-not-tar; exit 0",
     "the node sent an unreadable archive: "),
    ("nothing, exit 1", "echo 'tar: boom' >&2; exit 1", "copy from node1 failed: tar: boom"),
    ("a cut archive, exit 2", "head -c 1500 \"$1\"; echo 'tar: short' >&2; exit 2",
     "copy from node1 failed: tar: short"),
    ("a refused archive, then zeros forever", "cat \"$1\"; exec cat /dev/zero",
     "the node's archive holds 'out/x/../../x': a name outside 'out'; nothing was copied"),
]


@pytest.mark.parametrize(("script", "message"), [n[1:] for n in NODE_ENDS],
                         ids=[n[0] for n in NODE_ENDS])
def test_how_the_node_side_ends(tmp_path: Path, script: str, message: str) -> None:
    members = [_file("out/x/../../x")] if "/dev/zero" in script else \
        [_dir("out"), _file("out/f", data=b"z" * 4000)]
    archive = _archive(tmp_path / "node.tar", members)
    (tmp_path / "dest").mkdir()
    request = CopyRequest("node1", "/root/out", str(tmp_path / "dest"), to_node=False)
    with pytest.raises(LabctlError) as info:
        copy_from_node(_sh(script, archive), request, 20, room=PLENTY)  # type: ignore[arg-type]
    assert info.value.message.startswith(message)
    assert list((tmp_path / "dest").iterdir()) == []


def test_a_clash_with_the_destination_moves_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (dest / "out" / "b").mkdir(parents=True)
    (dest / "out" / "a").write_text("host\n")
    with pytest.raises(LabctlError, match=f"{dest}/out/b is a directory; the node's copy is "
                       "not"):
        _copy(tmp_path, [_dir("out"), _file("out/a", data=b"node\n"), _file("out/b")])
    assert (dest / "out" / "a").read_text() == "host\n"
    assert sorted(p.name for p in dest.iterdir()) == ["out"]


def test_a_symlink_in_the_destination_is_replaced_not_followed(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (dest / "out").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (dest / "out" / "f").symlink_to(tmp_path / "elsewhere" / "victim")
    _copy(tmp_path, [_dir("out"), _file("out/f", data=b"node\n")])
    assert not (dest / "out" / "f").is_symlink()
    assert list((tmp_path / "elsewhere").iterdir()) == []


@pytest.mark.parametrize("points_to", ["tree/a.txt", "tree"])
def test_a_source_that_is_a_link_is_copied_as_what_it_points_to(
        tmp_path: Path, points_to: str) -> None:
    tree = _local_node_tree(tmp_path)
    (tree.parent / "link").symlink_to(points_to)
    dest = tmp_path / "dest"
    dest.mkdir()
    request = CopyRequest("node1", str(tree.parent / "link"), str(dest), to_node=False)
    copy_from_node(_Local(), request, 30, room=PLENTY)  # type: ignore[arg-type]
    got = dest / "link"
    assert not got.is_symlink()
    assert (got.read_text() if points_to.endswith(".txt") else (got / "a.txt").read_text()) \
        == "a\n"


# ------------------------------------------------- special files at DST: refused, untouched

def _special(kind: str) -> Callable[[Path], None]:
    """Make a device file (as /dev/null), FIFO or socket at a path."""
    def make(path: Path) -> None:
        if kind.endswith("dev") and os.geteuid() != 0:
            pytest.skip("mknod needs root")
        if kind == "chardev":
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        elif kind == "blockdev":
            os.mknod(path, 0o600 | stat.S_IFBLK, os.makedev(7, 200))
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.bind(str(path))
    return make


SPECIAL_DST = ["chardev", "blockdev", "fifo", "socket"]
# Where the special file is: DST itself (cp node1:/x /dev/null), the entry DST/NAME a
# directory DST receives, and an entry inside a directory the copy merges into.
SPECIAL_PLACES = {"dst": ("out", ""), "dst-dir-entry": ("out", "out"),
                  "merged-entry": ("out", "out/a")}


@pytest.mark.parametrize("place", list(SPECIAL_PLACES))
@pytest.mark.parametrize("kind", SPECIAL_DST)
def test_a_special_file_at_the_destination_is_refused_and_untouched(
        tmp_path: Path, kind: str, place: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    top, where = SPECIAL_PLACES[place]
    dest = tmp_path / "dest"
    if place == "merged-entry":
        (dest / "out").mkdir(parents=True)
    else:
        dest.mkdir()
    special = dest / "special" if place == "dst" else dest / where
    _special(kind)(special)
    before = special.lstat()
    archive = _archive(tmp_path / "node.tar", [_dir("out"), _file("out/a", data=b"node\n")]
                       if place != "dst" else [_file("out", data=b"node\n")])
    monkeypatch.setattr(cli_cp, "open_lab", lambda lab: _Node(["cat", str(archive)]))
    target = str(special) if place == "dst" else str(dest)
    code, out, err = run_main(monkeypatch, capsys, "cp", f"node1:/root/{top}", target)
    assert code == 2 and "Traceback" not in out + err, err
    assert "labctl cp replaces only files, directories and links" in err and "hint:" in err
    after = special.lstat()
    assert (stat.S_IFMT(after.st_mode), after.st_rdev, after.st_ino) == (
        stat.S_IFMT(before.st_mode), before.st_rdev, before.st_ino)
    assert not [p for p in tmp_path.rglob(".labctl-cp.*")]  # nothing half-made left


@pytest.mark.parametrize("src", ["/root/a/..", "/root/a/../", "/root/a/.", "/root/a/./",
                                 "/..", "/root/.."])
def test_a_source_named_dot_or_dotdot_moves_nothing(
        tmp_path: Path, src: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The node sends an empty archive for it: DST's entries must not move into DST's
    parent (nor the parent's into its own)."""
    parent = tmp_path / "parent"
    dest = parent / "dest"
    dest.mkdir(parents=True)
    (dest / "mine").write_text("host\n")
    (parent / "mine").write_text("parent's own\n")
    archive = _archive(tmp_path / "node.tar", [])
    monkeypatch.setattr(cli_cp, "open_lab", lambda lab: _Node(["cat", str(archive)]))
    code, out, err = run_main(monkeypatch, capsys, "cp", f"node1:{src}", str(dest))
    assert code == 2 and "Traceback" not in out + err, err
    assert "hint: " in err
    assert (dest / "mine").read_text() == "host\n"
    assert (parent / "mine").read_text() == "parent's own\n"
    assert sorted(p.name for p in parent.iterdir()) == ["dest", "mine"]
    request = CopyRequest("node1", src, str(dest), to_node=False)  # past the CLI too
    with pytest.raises(UsageError):
        copy_from_node(_Node(["cat", str(archive)]), request, 20,  # type: ignore[arg-type]
                       room=PLENTY)
    assert sorted(p.name for p in dest.iterdir()) == ["mine"]
