"""Links and special files planted where labctl keeps its own files, with decoys.

A lab directory or the image cache may come from elsewhere (a copied state dir, a CI
cache), so what lies there is data. The corpus is generated per boundary: every path
labctl writes under a lab directory (WRITERS) meets every class of planted thing (CLASSES:
a link to a host file, a dangling link, links to a FIFO, a device and a directory, a FIFO
in place, the parent directory a link); every file it reads or hands on (READERS) also a
hard link. A new writer or reader is one row of its table and inherits every class.

What must hold for each: the decoys (a host file, a FIFO, a /dev/null-like character
device, a directory, a path that must not come to exist) are untouched, nothing hangs, and
the step either works (then labctl's file is a regular file of its own, not the link) or
stops with a LabctlError (a message and a hint, no traceback).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from labctl.errors import LabctlError
from labctl.locks import blocking_lock
from labctl.node import ssh
from labctl.providers.vagrant import VagrantProvider
from labctl.runners import labssh
from labctl.store.labdir import LabDir
from labctl.topology.resolved import Lab
from labctl.vm.machine import node_machine, start_detached
from tests.unit.fakes import within

# The decoys include a character device (mknod) and the steps make lab files as root would.
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")

NODE = "node1"
DECOY_TEXT = b"a host file labctl must not touch\n"


@dataclass(frozen=True)
class Decoys:
    file: Path
    fifo: Path
    device: Path
    directory: Path
    missing: Path  # must never come to exist

    def snapshot(self) -> dict[str, Any]:
        def one(path: Path) -> Any:
            info = path.lstat()
            kind = stat.S_IFMT(info.st_mode)
            body = path.read_bytes() if stat.S_ISREG(info.st_mode) else (
                sorted(os.listdir(path)) if stat.S_ISDIR(info.st_mode) else None)
            return kind, info.st_rdev, info.st_nlink, info.st_mtime_ns, body
        return {name: one(path) for name, path in (
            ("file", self.file), ("fifo", self.fifo), ("device", self.device),
            ("directory", self.directory))} | {"missing": os.path.lexists(self.missing)}


@pytest.fixture
def decoys(tmp_path: Path) -> Decoys:
    host = tmp_path / "host"
    host.mkdir()
    (host / "passwd").write_bytes(DECOY_TEXT)
    os.mkfifo(host / "fifo")
    os.mknod(host / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # as /dev/null
    (host / "etc").mkdir()
    (host / "etc" / "shadow").write_bytes(DECOY_TEXT)
    return Decoys(host / "passwd", host / "fifo", host / "null", host / "etc",
                  host / "created-by-labctl")


# --- the classes: what is planted at a path ------------------------------------------------

def _replace(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)


def _link_to(pick: Callable[[Decoys], Path]) -> Callable[[Path, Decoys], None]:
    def plant(path: Path, decoys: Decoys) -> None:
        _replace(path)
        path.symlink_to(pick(decoys))
    return plant


def _fifo(path: Path, decoys: Decoys) -> None:
    _replace(path)
    os.mkfifo(path)


def _parent_link(path: Path, decoys: Decoys) -> None:
    _replace(path.parent)
    path.parent.symlink_to(decoys.directory)


def _hard_link(path: Path, decoys: Decoys) -> None:
    _replace(path)
    os.link(decoys.file, path)


CLASSES: dict[str, Callable[[Path, Decoys], None]] = {
    "link-to-host-file": _link_to(lambda d: d.file),
    "dangling-link": _link_to(lambda d: d.missing),
    "link-to-fifo": _link_to(lambda d: d.fifo),
    "link-to-device": _link_to(lambda d: d.device),
    "link-to-directory": _link_to(lambda d: d.directory),
    "fifo-in-place": _fifo,
    "parent-is-a-link": _parent_link,
}
READ_CLASSES = CLASSES | {"hard-link-to-host-file": _hard_link}


# --- the boundaries: where labctl writes or reads under a lab directory ---------------------

@dataclass
class Lab_:
    root: Path  # the lab directory
    tmp: Path

    @property
    def machine(self) -> Any:
        return node_machine("ut-links", NODE, self.root / "nodes" / NODE)


def _prepared(tmp: Path) -> Lab_:
    lab = Lab_(tmp / "labs" / "ut-links", tmp)
    node_dir = lab.root / "nodes" / NODE
    node_dir.mkdir(parents=True)
    (node_dir / "initrd").write_bytes(b"initrd\n")
    (node_dir / "console.log").write_bytes(b"the previous boot\n")
    (node_dir / "boot").mkdir()
    for name in ("kernel", "initrd"):
        (node_dir / "boot" / name).write_bytes(b"old copy\n")
    (tmp / "image").mkdir(exist_ok=True)
    (tmp / "image" / "vmlinux").write_bytes(b"kernel\n")
    return lab


def _launch(lab: Lab_) -> None:
    """The launch of a node (qemu is `true` here: what labctl itself opens is the test)."""
    machine = lab.machine
    machine.launch(["true", "-kernel", str(lab.tmp / "image" / "vmlinux"), "-initrd",
                    str(machine.initrd)], [], "ut-links-unused", NODE)


def _release(lab: Lab_) -> None:
    lab.machine.release_boot_files()


def _initrd(lab: Lab_) -> None:
    stage1 = lab.tmp / "image" / "vmlinux"
    lab.machine.make_initrd(stage1, b"payload")


def _host_key(lab: Lab_) -> None:
    lab.machine.make_host_key()


def _disk(lab: Lab_) -> None:
    rootfs = lab.tmp / "image" / "root.ext4"
    with rootfs.open("wb") as f:
        f.truncate(1 << 20)
    lab.machine.make_disk(rootfs)


def _faults_lock(lab: Lab_) -> None:
    with blocking_lock(lab.root / ".faults.lock"):
        pass


def _helper_log(lab: Lab_) -> None:
    log = lab.machine.helper_log
    start_detached({log: ["sh", "-c", "echo started >&2"]}, lab.root)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if b"started" in log.read_bytes():
                return
        time.sleep(0.02)


def _vagrant_log(lab: Lab_) -> None:
    provider = VagrantProvider(Lab("ut-links", "vagrant", "", (), ()),
                               LabDir("ut-links", lab.root.parent))
    for append in (True, False):
        with provider._open_log(append=append) as log:
            log.write("vagrant says\n")


def _mpi_key(lab: Lab_) -> None:
    handle = SimpleNamespace(labdir=LabDir("ut-links", lab.root.parent),
                             lab=SimpleNamespace(name="ut-links"))
    private, public = labssh.lab_key(handle)  # type: ignore[arg-type]
    assert DECOY_TEXT.decode() not in private + public
    assert private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")


# name -> (path under the lab directory, the step that writes or reads it)
WRITERS: dict[str, tuple[str, Callable[[Lab_], None]]] = {
    "launch:console.log": (f"nodes/{NODE}/console.log", _launch),
    "launch:console.log.1": (f"nodes/{NODE}/console.log.1", _launch),
    "launch:qemu.log": (f"nodes/{NODE}/qemu.log", _launch),
    "launch:qemu.pid": (f"nodes/{NODE}/qemu.pid", _launch),
    "launch:boot/kernel": (f"nodes/{NODE}/boot/kernel", _launch),
    "launch:boot/initrd": (f"nodes/{NODE}/boot/initrd", _launch),
    "launch:boot": (f"nodes/{NODE}/boot", _launch),
    "release:boot/kernel": (f"nodes/{NODE}/boot/kernel", _release),
    "release:boot/initrd": (f"nodes/{NODE}/boot/initrd", _release),
    "make_initrd:initrd": (f"nodes/{NODE}/initrd", _initrd),
    "make_host_key:key": (f"nodes/{NODE}/ssh_host_ed25519_key", _host_key),
    "make_host_key:pub": (f"nodes/{NODE}/ssh_host_ed25519_key.pub", _host_key),
    "make_disk:disk.qcow2": (f"nodes/{NODE}/disk.qcow2", _disk),
    "lock:.faults.lock": (".faults.lock", _faults_lock),
    "start_detached:helper-start.log": (f"nodes/{NODE}/helper-start.log", _helper_log),
    "vagrant:vagrant.log": ("vagrant.log", _vagrant_log),
    "run-mpi:mpi-ssh/id_ed25519": ("mpi-ssh/id_ed25519", _mpi_key),
    "run-mpi:mpi-ssh/id_ed25519.pub": ("mpi-ssh/id_ed25519.pub", _mpi_key),
    "run-mpi:mpi-ssh": ("mpi-ssh", _mpi_key),
}
# What labctl reads from the lab directory and hands on (into the node, to qemu): also
# refused as a second name of a host file.
READERS: dict[str, tuple[str, Callable[[Lab_], None]]] = {
    "launch:initrd": (f"nodes/{NODE}/initrd", _launch),
    "run-mpi:mpi-ssh/id_ed25519": ("mpi-ssh/id_ed25519", _mpi_key),
}
# Steps that leave what is not their own where it is (emptying the boot copies: a link
# there is neither followed nor replaced).
LEAVES = {"release:boot/kernel", "release:boot/initrd"}


def _applies(relative: str, kind: str) -> bool:
    return kind != "parent-is-a-link" or "/" in relative  # not the lab directory itself


CASES = [(f"{w}/{c}", w, c) for w in WRITERS for c in CLASSES if _applies(WRITERS[w][0], c)]
CASES += [(f"{r}/{c}", r, c) for r in READERS for c in READ_CLASSES
          if not (r in WRITERS and c in CLASSES) and _applies(READERS[r][0], c)]


def _table(boundary: str) -> tuple[str, Callable[[Lab_], None]]:
    return WRITERS.get(boundary) or READERS[boundary]


@pytest.mark.parametrize(("boundary", "kind"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_planted_link_or_special_file_reaches_no_decoy(
        boundary: str, kind: str, short_tmp: Path, decoys: Decoys) -> None:
    lab = _prepared(short_tmp)  # short: a launch's sockets must fit (no refusal for that)
    relative, step = _table(boundary)
    if boundary.startswith("run-mpi"):
        step(lab)  # a key made once: the plant replaces one of its files
    planted = lab.root / relative
    READ_CLASSES[kind](planted, decoys)
    before = decoys.snapshot()
    refused = False
    with within(20):
        try:
            step(lab)
        except LabctlError as error:
            assert error.hint, error.message
            refused = True
    assert decoys.snapshot() == before
    if not refused and boundary not in LEAVES and kind != "parent-is-a-link":
        # it worked: what is there now is labctl's own, not the planted link
        assert not planted.is_symlink(), boundary


def test_the_classes_refuse_or_replace_never_follow(short_tmp: Path, decoys: Decoys) -> None:
    """The corpus is not vacuous: a dangling console.log is replaced by labctl's own file,
    and a linked mpi key is refused with a message."""
    lab = _prepared(short_tmp)
    console = lab.root / "nodes" / NODE / "console.log"
    CLASSES["dangling-link"](console, decoys)
    _launch(lab)
    assert stat.S_ISREG(console.lstat().st_mode) and not decoys.missing.exists()
    _mpi_key(lab)
    key = lab.root / "mpi-ssh" / "id_ed25519"
    READ_CLASSES["hard-link-to-host-file"](key, decoys)
    with pytest.raises(LabctlError, match="hard links"):
        _mpi_key(lab)


# --- the ssh control sockets -----------------------------------------------------------

def _master_elsewhere(tmp_path: Path) -> tuple[socket.socket, Path]:
    """A unix socket standing in for another ssh master (another lab's, another host's)."""
    path = tmp_path / "host" / "other-master"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    return server, path


@pytest.mark.parametrize("kind", ["link-to-master", "link-to-host-file", "dangling-link",
                                  "fifo", "regular-file"])
def test_a_control_path_that_is_not_our_socket_gets_no_command(
        kind: str, tmp_path: Path, decoys: Decoys) -> None:
    server, master = _master_elsewhere(tmp_path)
    labdir = tmp_path / "labs" / "ut-links"
    labdir.mkdir(parents=True)
    config = labdir / "ssh_config"
    control = ssh.control_path(config, NODE)
    {"link-to-master": lambda: control.symlink_to(master),
     "link-to-host-file": lambda: control.symlink_to(decoys.file),
     "dangling-link": lambda: control.symlink_to(decoys.missing),
     "fifo": lambda: os.mkfifo(control),
     "regular-file": lambda: control.write_text("")}[kind]()
    server.setblocking(False)
    with pytest.raises(LabctlError, match="not the ssh master socket labctl made") as refused:
        ssh.ssh_argv(config, NODE, ["true"])
    assert "rm " in (refused.value.hint or "")
    with pytest.raises(LabctlError, match="not the ssh master socket"):
        ssh.start_master(config, NODE, time.monotonic() + 1)
    ssh.close_masters(config, [NODE], wait=0.1)  # never `-O exit` through the link
    with pytest.raises(BlockingIOError):
        server.accept()  # nothing connected to the other master
    server.close()


def test_our_own_socket_is_a_control_path(tmp_path: Path) -> None:
    labdir = tmp_path / "labs" / "ut-links"
    labdir.mkdir(parents=True)
    config = labdir / "ssh_config"
    own = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    own.bind(str(ssh.control_path(config, NODE)))
    try:
        argv = ssh.ssh_argv(config, NODE, ["true"])
        assert argv[:3] == ["ssh", "-F", str(config)]
    finally:
        own.close()


def test_qemu_opens_console_log_only_as_labctls_own_file(short_tmp: Path,
                                                         decoys: Decoys) -> None:
    """The console log qemu writes (it opens it by name) is one labctl made just before:
    a dangling link's target is never created, by labctl or by qemu."""
    lab = _prepared(short_tmp)
    console = lab.root / "nodes" / NODE / "console.log"
    console.unlink()
    console.symlink_to(decoys.missing)
    machine = lab.machine
    machine.launch(["sh", "-c", f"echo booted > {console}", "-kernel",
                    str(lab.tmp / "image" / "vmlinux"), "-initrd", str(machine.initrd)],
                   [], "ut-links-unused", NODE)
    deadline = time.monotonic() + 10
    while b"booted" not in console.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert console.read_bytes() == b"booted\n" and not console.is_symlink()
    assert not os.path.lexists(decoys.missing)
