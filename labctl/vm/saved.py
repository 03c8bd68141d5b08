"""Saved machines: a node booted once, saved with qemu's own migration, restored per node.

A saved machine is kept per key (image, kernel (the image's, or a kernel of the node's
own by its cache entry RELEASE-CONTENTHASH: a rebuilt bzImage is another key), qemu's
version, labctl's restore format and node-side code, accelerator, memory, CPUs, number
of data NICs, RDMA kind, the argv's shape) in the image cache, beside the image:
cache/saved/IMAGE-KEY/ holds
  ram         the machine's RAM: its memory-backend-file while it ran (share=on), which
              every node restored from it maps copy on write (labctl.vm.machine.Restore)
  state       its devices as `migrate` wrote them, RAM left out (x-ignore-shared)
  disk.qcow2  its root disk's overlay at that moment (backed by the image's root.ext4):
              each restored node starts from a copy (a few MiB), never from it, so a saved
              machine can be replaced while labs restored from it run
  meta.json   format, key, the files' sizes and SHA-256, when it was made and how long
  console.log its boot
The machine boots with neutral settings up to the point where node-init.sh waits for its
identity (labctl/nodeside/identity.py on ttyS1), and is saved there: nothing
node-specific has happened yet. Its files are data, never authority (a cache restored
from elsewhere is such a directory): a saved machine is used only if what qemu will open
is what labctl made here. The directory and its files are no links, each file has one
name (no hard link to a host file), their sizes are what the shape allows (checked before
a byte is hashed), disk.qcow2 names exactly the image's root.ext4 as its backing file and
no external data file, and their checksums match the record labctl kept when it made
them, outside the cache (paths.records_root(): RECORDS/saved/ENTRY.json, with what stat
said of the files then, so that an unchanged file is not hashed again). No record there: the
saved machine is not labctl's, and is made again. Anything else is a reason to boot cold.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from labctl import bounded, hostproc, safefs
from labctl.errors import LabctlError
from labctl.images.builder import CorruptImage, Image
from labctl.images.kernels import PreparedKernel, kernels_root
from labctl.images.qcow2 import NotOurQcow2, check_overlay
from labctl.locks import blocking_lock, try_lock
from labctl.net import labnet
from labctl.node.env import env_file, node_code_files
from labctl.paths import cache_root, records_root
from labctl.progress import Progress
from labctl.store.state import TapState, atomic_write
from labctl.topology.resolved import Node
from labctl.vm import ramguard
from labctl.vm.machine import (
    KERNEL_APPEND,
    Nic,
    QemuMachine,
    Restore,
    free_port,
    kernel_env,
    machine_payload,
    modules_drive,
)

# Bump when what a saved machine holds or how it is restored changes: older ones are then
# not used (their key differs, and meta.json says their format).
RESTORE_FORMAT = "2"
META_BYTES = 64 << 10
# What a saved machine's files may be, beyond the guest's memory size: its devices' state
# (a few MiB beside the RAM, which x-ignore-shared leaves out) and the disk's overlay
# (what the boot wrote on the image's root disk).
STATE_MAX_BYTES = 256 << 20
DISK_SLACK_BYTES = 1 << 30
HASH_SECONDS = 60.0  # hashing a saved machine's files (GiB/s on a quiet host)
SAVE_BOOT_SECONDS = 300.0  # the template's boot to its wait for identity, under TCG load
MIGRATE_SECONDS = 120.0
VERSION_SECONDS = 30.0  # qemu-system-x86_64 --version
WAITING = "labctl: waiting for identity"  # identity.py's line on the console
TEMPLATE_NAME = "labctl-saved"  # the saved machine's host name until a node's identity
TEMPLATE_MGMT_MAC = "02:00:00:00:00:00"
IGNORE_SHARED = {"capability": "x-ignore-shared", "state": True}
NETNS_SAVING = "labctl-.saving-"  # + pid: no lab's namespace (a lab name has no dot)
KERNEL_ENTRY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~-]{0,63}-[0-9a-f]{16}")


def template_mac(index: int) -> str:
    """The saved machine's data NIC `index` (a restored node gets its own MAC there)."""
    return f"02:00:00:00:{index + 1:02x}:00"


@dataclass(frozen=True)
class MachineShape:
    """What a saved machine is made for: the nodes it can become."""

    accel: str
    memory_mib: int
    cpus: int
    nics: int  # data NICs
    rdma: str  # rxe, siw or none: the modules node-init.sh loaded before the save

    @classmethod
    def of(cls, node: Node, accel: str) -> MachineShape:
        return cls(accel, node.memory_mib, node.cpus, len(node.interfaces), node.rdma)


@dataclass(frozen=True)
class SavedMachine:
    path: Path

    @property
    def state(self) -> Path:
        return self.path / "state"

    @property
    def disk(self) -> Path:
        return self.path / "disk.qcow2"

    @property
    def ram(self) -> Path:
        return self.path / "ram"

    def files(self) -> list[tuple[str, Path]]:
        """The files meta.json gives a size and checksum, by their name there."""
        return [("state", self.state), ("disk", self.disk), ("ram", self.ram)]

    def restore(self) -> Restore:
        """What a node restored from this saved machine adds to its argv."""
        return Restore(self.ram, self.state)

    @property
    def meta(self) -> Path:
        return self.path / "meta.json"

    @property
    def record(self) -> Path:
        """Its checksums as labctl recorded them when it made it, outside the cache."""
        return _records() / f"{self.path.name}.json"


def _records() -> Path:
    return records_root() / "saved"


class Unusable(Exception):
    """A saved machine labctl will not restore from; str() says why."""


def template_argv(machine: QemuMachine, image: Image, shape: MachineShape, port: int,
                  restore: Restore, kernel: PreparedKernel | None = None) -> list[str]:
    """The saved machine's qemu: a node's devices in a node's order (node_argv), a node on
    a kernel of its own with that kernel's modules disk after its root disk."""
    nics = [Nic(f"eth{k + 1}", template_mac(k), labnet.tap_name(0, f"eth{k + 1}"))
            for k in range(shape.nics)]
    return machine.argv(accel=shape.accel, memory_mib=shape.memory_mib, cpus=shape.cpus,
                        kernel=image.kernel if kernel is None else kernel.boot,
                        append=KERNEL_APPEND + " labctl.node=saved",
                        ssh_port=port, mgmt_mac=TEMPLATE_MGMT_MAC, nics=nics,
                        extra_drives=() if kernel is None else (
                            modules_drive(kernel.modules_disk),),
                        restore=restore)


@cache
def qemu_version() -> str:
    try:
        out = hostproc.run(["qemu-system-x86_64", "--version"], timeout=VERSION_SECONDS,
                           check=False, limit=64 << 10).stdout
    except hostproc.HostProcessError:
        return "?"
    return out.splitlines()[0][:200] if out else "?"


@cache
def node_code_digest() -> str:
    digest = hashlib.sha256()
    for rel, path in node_code_files():
        digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def saved_key(image: Image, shape: MachineShape, kernel: PreparedKernel | None = None) -> str:
    """Every input that changes what a saved machine is (its argv with placeholder paths
    stands for the devices, their order and the kernel's command line). A kernel of the
    node's own is named by its cache entry, RELEASE-CONTENTHASH (kernels.content_digest:
    its bzImage, configuration and every module), so a rebuilt kernel is a new key."""
    placeholder = QemuMachine(Path("/saved"), "saved")
    placeholder_kernel = None if kernel is None else PreparedKernel(
        None, Path("/kernel"), Path("/kernel") / kernel.boot.name, Path("/kernel/modules"))
    inputs = {
        "format": RESTORE_FORMAT, "image": image.path.name,
        "kernel": str(image.manifest.get("kernel", "")) if kernel is None else
        f"own:{kernel.path.name}", "qemu": qemu_version(),
        "node_code": node_code_digest(), "shape": shape.__dict__,
        "argv": template_argv(placeholder, image, shape, 0, Restore(Path("/saved/ram"), None),
                              placeholder_kernel),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def saved_dir(image: Image, shape: MachineShape, kernel: PreparedKernel | None = None) -> Path:
    return cache_root() / "saved" / f"{image.path.name}-{saved_key(image, shape, kernel)}"


def file_sha256(path: Path, deadline: float | None = None) -> str:
    """The file's SHA-256, never through a link; Unusable past `deadline` (monotonic)."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            if deadline is not None and time.monotonic() > deadline:
                raise Unusable(f"hashing {path.name} took over {HASH_SECONDS:.0f} s")
    return digest.hexdigest()


def size_limits(image: Image, shape: MachineShape) -> dict[str, int]:
    """The largest each file of a saved machine for `shape` on `image` may be (its RAM is
    exactly the guest's memory): checked before anything is hashed."""
    try:
        rootfs = os.stat(image.rootfs).st_size
    except OSError:
        rootfs = 0
    return {"state": STATE_MAX_BYTES, "disk": rootfs + DISK_SLACK_BYTES,
            "ram": shape.memory_mib << 20}


def check_saved(path: Path, key: str, image: Image, shape: MachineShape) -> SavedMachine:
    """The saved machine in `path` if labctl can restore from it; Unusable (why) if not;
    FileNotFoundError when there is none."""
    saved = SavedMachine(path)
    try:
        entry = path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        raise FileNotFoundError(path) from None
    if not stat.S_ISDIR(entry.st_mode):
        raise Unusable("it is a symbolic link or not a directory")
    try:
        meta = bounded.load_object(bounded.read_regular(saved.meta, META_BYTES))
    except bounded.BoundedError as exc:
        raise Unusable(f"meta.json: {exc}") from None
    except (FileNotFoundError, NotADirectoryError):
        raise FileNotFoundError(path) from None
    except OSError as exc:
        raise Unusable(f"meta.json: {exc.strerror or exc}") from None
    if meta.get("format") != RESTORE_FORMAT:
        raise Unusable(f"made by another labctl (restore format {str(meta.get('format'))[:20]!r},"
                       f" this labctl's is {RESTORE_FORMAT!r})")
    if meta.get("key") != key:
        raise Unusable("its meta.json names another key")
    stamps = _check_files(saved, meta, size_limits(image, shape))
    try:
        fd = os.open(saved.disk, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            check_overlay(fd, str(image.rootfs))
        finally:
            os.close(fd)
    except NotOurQcow2 as why:
        raise Unusable(f"disk.qcow2: {why}") from None
    except OSError as exc:
        raise Unusable(f"disk.qcow2: {exc.strerror or exc}") from None
    record = _read_record(saved)
    if record is None:
        raise Unusable("labctl has no record of making it on this host (a cache from "
                       f"elsewhere?): its checksums are not in {_records()}")
    if record.get("stamps") == stamps:
        return saved
    sums = record.get("sha256")
    deadline = time.monotonic() + HASH_SECONDS
    for name, file in saved.files():
        try:
            if not isinstance(sums, dict) or file_sha256(file, deadline) != sums.get(name):
                raise Unusable(f"{file.name} does not match the checksum labctl recorded "
                               "when it made it (corrupt or replaced)")
        except OSError as exc:
            raise Unusable(f"{file.name}: {exc.strerror or exc}") from None
    _write_record(saved, sums, stamps)
    return saved


def _check_files(saved: SavedMachine, meta: dict[str, Any],
                 limits: dict[str, int]) -> dict[str, list[int]]:
    """Each file's stamp, once it is a regular file of one name within its size limit
    and of the size meta.json says; Unusable otherwise."""
    stamps: dict[str, list[int]] = {}
    for name, file in saved.files():
        size = meta.get(f"{name}_bytes")
        if not isinstance(size, int) or isinstance(size, bool):
            raise Unusable(f"meta.json has no valid {name} size and checksum")
        try:
            info = file.lstat()
        except FileNotFoundError:
            raise Unusable(f"{file.name} is missing or not a regular file") from None
        except OSError as exc:
            raise Unusable(f"{file.name}: {exc.strerror or exc}") from None
        if not stat.S_ISREG(info.st_mode):
            raise Unusable(f"{file.name} is missing or not a regular file")
        if info.st_nlink != 1:
            raise Unusable(f"{file.name} has {info.st_nlink} hard links (one is labctl's)")
        limit = limits[name]
        if info.st_size > limit or (name == "ram" and info.st_size != limit):
            raise Unusable(f"{file.name} is {info.st_size} bytes, its shape allows "
                           f"{'exactly ' if name == 'ram' else 'at most '}{limit}")
        if info.st_size != size:
            raise Unusable(f"{file.name} is {info.st_size} bytes, meta.json says {size}")
        stamps[name] = _stamp(info)
    return stamps


# Hashing the state costs every `up` about 0.2 s for a 512 MiB node (130 MiB at ~550 MiB/s):
# once the files matched their checksums, the record keeps what stat said of them then.
# Any write since changes their mtime and ctime (ctime cannot be set back), so equal stamps
# mean the very bytes that were checked; anything else is hashed again.
def _stamp(st: os.stat_result) -> list[int]:
    """device, inode, size (index 2), mtime and ctime"""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _read_record(saved: SavedMachine) -> dict[str, Any] | None:
    """The record labctl wrote when it made `saved`, if the folder it is in is root's
    own (not writable by others): else None."""
    try:
        folder = _records().lstat()
        if (not stat.S_ISDIR(folder.st_mode) or folder.st_uid != os.geteuid()
                or folder.st_mode & 0o022):
            return None
        return bounded.load_object(bounded.read_regular(saved.record, META_BYTES))
    except (bounded.BoundedError, OSError):
        return None


def _write_record(saved: SavedMachine, sums: object, stamps: dict[str, list[int]]) -> None:
    with contextlib.suppress(OSError):  # only a cost: the next `up` hashes again
        atomic_write(saved.record, json.dumps({"sha256": sums, "stamps": stamps}) + "\n",
                     0o600)


def record_made(saved: SavedMachine) -> None:
    """Record the checksums of the saved machine labctl has just made (outside the cache:
    only this record makes a saved machine one labctl restores from)."""
    folder = _records()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder.parent, 0o700)
    os.chmod(folder, 0o700)
    sums = {name: file_sha256(file) for name, file in saved.files()}
    stamps = {name: _stamp(file.lstat()) for name, file in saved.files()}
    atomic_write(saved.record, json.dumps({"sha256": sums, "stamps": stamps}) + "\n", 0o600)


def discard(path: Path) -> None:
    """Remove a saved machine (restores already started read their own open files), and
    labctl's record of it; a link there is removed, never followed."""
    with contextlib.suppress(OSError):
        SavedMachine(path).record.unlink(missing_ok=True)
    if path.is_symlink() or (os.path.lexists(path) and not path.is_dir()):
        with contextlib.suppress(OSError):
            path.unlink()
        return
    if not path.exists():
        return
    gone = path.with_name(f".gone-{path.name}-{os.getpid()}")
    with contextlib.suppress(OSError):
        path.rename(gone)
        shutil.rmtree(gone, ignore_errors=True)


def find_or_make(image: Image, shape: MachineShape, progress: Progress,
                 note: Progress, kernel: PreparedKernel | None = None) -> SavedMachine | None:
    """The saved machine for `shape` on `image` (and `kernel`, a kernel of the node's own),
    made now when there is none (once per
    key; concurrent `up`s wait for the one making it). None when it cannot be used or
    made: `note` gets the one line saying why (the caller boots cold)."""
    if not ramguard.supported():
        note(f"booting cold: restored nodes share their saved RAM file, which needs a "
             f"seccomp filter labctl has for x86_64 and aarch64 hosts only, not for "
             f"{platform.machine()[:40]!r}")
        return None
    path = saved_dir(image, shape, kernel)
    key = path.name.rsplit("-", 1)[1]
    with blocking_lock(path.with_name(f".{path.name}.lock")):
        try:
            return check_saved(path, key, image, shape)
        except FileNotFoundError:
            pass
        except Unusable as why:
            note(f"saved machine {path} is unusable ({why}): booting cold; it is made "
                 "again at the next `up`")
            discard(path)
            return None
        progress(f"saving a machine for restores ({path.name}, once per image, kernel and "
                 "shape)")
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        # a new directory of its own (O_EXCL, as mkdtemp makes it): never one planted
        # under the name (a link would have the template's disk and RAM written elsewhere)
        # a short name: qemu's sockets in it must fit a socket address (108 bytes), which
        # the saved machine's own name (image, key) does not leave room for
        work = Path(tempfile.mkdtemp(prefix=".make-", suffix=f"-{os.getpid()}",
                                     dir=path.parent))
        try:
            made = make_saved(path, work, key, image, shape, progress, kernel)
        except (LabctlError, OSError) as exc:
            first = (exc.message if isinstance(exc, LabctlError) else str(exc)).splitlines()
            note(f"could not save a machine for restores ({first[0] if first else '?'}; "
                 f"its boot: {work / 'console.log'}): booting cold")
            return None
    prune(path.parent)
    return made


@dataclass(frozen=True)
class SavedListing:
    """One saved machine as `labctl image list` shows it (its meta.json, read bounded)."""

    path: Path
    image: str
    shape: dict[str, Any] | None  # None: not recorded (an older labctl)
    state_bytes: int | None  # the devices' state
    ram_bytes: int | None  # the RAM file (the guest's memory size; holes take no disk)
    made: float | None
    usable: bool  # its key is the one this labctl and qemu give its image and shape


def list_saved(saved_root: Path) -> list[SavedListing]:
    found: list[SavedListing] = []
    if not saved_root.is_dir():
        return found
    for path in sorted(saved_root.iterdir()):
        if path.name.startswith(".") or not path.is_dir() or path.is_symlink():
            continue
        try:
            meta = bounded.load_object(bounded.read_regular(path / "meta.json", META_BYTES))
        except (bounded.BoundedError, OSError):
            meta = {}
        image, _, key = path.name.rpartition("-")
        shape = _shape(meta.get("shape"))
        kernel = meta.get("kernel")
        made = meta.get("made")
        found.append(SavedListing(
            path, image, None if shape is None else dataclasses.asdict(shape),
            _size(meta.get("state_bytes")), _size(meta.get("ram_bytes")),
            float(made) if isinstance(made, (int, float)) and not isinstance(made, bool)
            else None,
            shape is not None and _current_key(image, shape, kernel) == key))
    return found


def _size(recorded: object) -> int | None:
    return recorded if isinstance(recorded, int) and not isinstance(recorded, bool) else None


def _shape(recorded: object) -> MachineShape | None:
    """meta.json's shape, if it is one (it is data: any other value is no shape)."""
    if not isinstance(recorded, dict) or set(recorded) != {
            f.name for f in dataclasses.fields(MachineShape)}:
        return None
    shape = MachineShape(**recorded)  # exactly its fields (checked above)
    types_ok = all(isinstance(getattr(shape, f), str) for f in ("accel", "rdma")) and all(
        isinstance(getattr(shape, f), int) and not isinstance(getattr(shape, f), bool)
        for f in ("memory_mib", "cpus", "nics"))
    return shape if types_ok else None


def _current_key(image_name: str, shape: MachineShape, kernel_name: object = None
                 ) -> str | None:
    """The key this labctl and qemu give `shape` on the cached image `image_name` (and the
    cached own kernel `kernel_name`, meta.json's: data) (None: no such image or kernel): a
    saved machine under another key is one no `up` here restores."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", image_name):
        return None
    kernel = None
    if kernel_name is not None:
        if not isinstance(kernel_name, str) or not KERNEL_ENTRY_RE.fullmatch(kernel_name):
            return None
        kernel = PreparedKernel.at(kernels_root() / kernel_name)
        if kernel is None:
            return None
    try:
        image = Image.at(cache_root() / "images" / image_name)
    except (FileNotFoundError, NotADirectoryError, CorruptImage):
        return None
    return saved_key(image, shape, kernel)


def labctl_inputs() -> dict[str, str]:
    """The labctl and qemu that made a saved machine, in its meta.json for whoever reads it
    (no decision reads it back: they are in its key, which prune recomputes)."""
    return {"format": RESTORE_FORMAT, "node_code": node_code_digest(), "qemu": qemu_version()}


def prune(saved_root: Path) -> list[Path]:
    """Remove what no `up` of this labctl can use (each saved machine is ~130 MiB): saved
    machines whose key is not the one this labctl and qemu give their image and shape (made
    by another labctl or qemu, or with no shape recorded), of an image no longer in the
    cache, and the work directories of failed saves whose labctl has exited. One whose lock
    another process holds is left. Returns what was removed."""
    removed: list[Path] = []
    for path in sorted(saved_root.glob(".make-*")) + sorted(saved_root.glob(".gone-*")):
        pid = path.name.rsplit("-", 1)[-1]
        if path.is_dir() and pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _stop_orphaned_save(path, int(pid))
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    for listing in list_saved(saved_root):
        if listing.usable:
            continue
        with try_lock(listing.path.with_name(f".{listing.path.name}.lock")) as free:
            if free:  # no `up` is checking or making it
                discard(listing.path)
                removed.append(listing.path)
    return removed


def _stop_orphaned_save(work: Path, labctl_pid: int) -> None:
    """A labctl killed while it saved a machine (SIGKILL, an OOM kill) leaves its qemu
    running with nobody to stop it, and its namespace: stop the qemu that this work
    directory's pid file names, if it is that directory's qemu (QemuMachine.stop checks
    its -pidfile: never a recycled pid), and remove the dead labctl's namespace."""
    if not work.name.startswith(".make-"):
        return
    machine = QemuMachine(work, "labctl-saving", work.parent)
    with contextlib.suppress(LabctlError):  # one stuck in the kernel: `ps` shows it
        machine.stop(machine.pidfile_pid())
    labnet.delete_netns(f"{NETNS_SAVING}{labctl_pid}")


def template_env(shape: MachineShape) -> dict[str, str]:
    return {"LABCTL_LAB": "", "LABCTL_NODE": TEMPLATE_NAME, "LABCTL_RDMA": shape.rdma,
            "LABCTL_RDMA_DEV": "", "LABCTL_RDMA_NETDEV": "",
            "LABCTL_MGMT_MAC": TEMPLATE_MGMT_MAC, "LABCTL_IFACES": "", "LABCTL_SAVE": "1"}


def make_saved(path: Path, work: Path, key: str, image: Image, shape: MachineShape,
               progress: Progress, kernel: PreparedKernel | None = None) -> SavedMachine:
    """Boot the template in `work` to its wait for identity, save it, keep its state and
    disk in `path` (`work` stays for diagnosis when that fails)."""
    started = time.monotonic()
    machine = QemuMachine(work, f"labctl-saving-{path.name}", path.parent)
    machine.make_disk(image.rootfs)
    machine.make_initrd(image.initrd if kernel is None else kernel.initrd(image),
                        machine_payload(template_env(shape) | kernel_env(kernel), None, None))
    ram = work / "ram"
    # empty: qemu sizes it (it is the saved machine's RAM from now on); made here, never
    # a file a link waiting there names
    os.close(safefs.create(ram, path.parent, 0o600, make_parents=False))
    argv = template_argv(machine, image, shape, free_port(), Restore(ram, None), kernel)
    taps = [TapState(labnet.tap_name(0, f"eth{k + 1}"), "br0", 1500) for k in range(shape.nics)]
    netns = f"{NETNS_SAVING}{os.getpid()}"
    labnet.delete_netns(netns)  # one left by a killed labctl of this pid
    labnet.create_netns(netns)
    pid = 0
    try:
        labnet.add_bridge(netns, "br0", 1500)
        pid = machine.launch(argv, taps, netns, "saving")
        _wait_waiting(machine, pid, progress)
        machine.qmp("stop")  # one pass: nothing dirtied while it is written
        # qemu's default migration speed limit is 32 MiB/s
        machine.qmp("migrate-set-parameters", **{"max-bandwidth": 1 << 40})
        # the RAM is the file (share=on): the state holds the devices only
        machine.qmp("migrate-set-capabilities", capabilities=[IGNORE_SHARED])
        machine.qmp("migrate", uri=f"exec:cat > {shlex.quote(str(work / 'state'))}")
        _wait_migrated(machine)
    finally:
        if pid:
            machine.stop(pid)
        labnet.delete_netns(netns)
    for leftover in ("boot", "initrd", "identity.sock", "qmp.sock", "qemu.pid"):
        target = work / leftover
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)
    meta: dict[str, Any] = {"format": RESTORE_FORMAT, "key": key, "inputs": labctl_inputs(),
                            "image": image.path.name, "shape": dataclasses.asdict(shape),
                            "kernel": None if kernel is None else kernel.path.name}
    for name, file in SavedMachine(work).files():
        meta |= {f"{name}_bytes": file.lstat().st_size, f"{name}_sha256": file_sha256(file)}
    meta |= {"made": time.time(), "seconds": round(time.monotonic() - started, 1)}
    atomic_write(work / "meta.json", json.dumps(meta, indent=2) + "\n")
    discard(path)  # a link or leftover in its place is not followed by the rename
    work.rename(path)  # the same inode and times: the stamps stay true
    made = SavedMachine(path)
    record_made(made)
    return made


def _wait_waiting(machine: QemuMachine, pid: int, progress: Progress) -> None:
    deadline = time.monotonic() + SAVE_BOOT_SECONDS
    started = time.monotonic()
    while True:
        console = machine.console()
        if WAITING in console:
            return
        failed = machine.boot_failed(console)
        if failed is not None:
            raise machine.failure("the machine to save", failed)
        if not machine.owns(pid):
            raise machine.failure("the machine to save", "qemu exited")
        if time.monotonic() > deadline:
            raise machine.failure("the machine to save",
                                  f"not waiting for its identity after {SAVE_BOOT_SECONDS:.0f} s")
        progress(f"booting the machine to save ({time.monotonic() - started:.0f} s): "
                 f"{machine.stage(console)}")
        time.sleep(0.1)


def _wait_migrated(machine: QemuMachine) -> None:
    deadline = time.monotonic() + MIGRATE_SECONDS
    while True:
        info: Any = machine.qmp("query-migrate")
        status = info.get("status") if isinstance(info, dict) else None
        if status == "completed":
            return
        if status in ("failed", "cancelled"):
            raise LabctlError(f"qemu could not save the machine: {info.get('error-desc', '?')}")
        if time.monotonic() > deadline:
            raise LabctlError(f"saving the machine took over {MIGRATE_SECONDS:.0f} s")
        time.sleep(0.05)


def identity_message(env: dict[str, str], authorized_key: str, host_key: bytes,
                     macs: list[tuple[str, str]]) -> bytes:
    """What identity.py reads on a restored node's ttyS1 (its docstring has the format)."""
    import base64

    def item(path: str, mode: int, data: bytes) -> dict[str, Any]:
        return {"path": path, "mode": mode, "data": base64.b64encode(data).decode()}

    body = json.dumps({
        "files": [item("/etc/labctl/node.env", 0o644, env_file(env)),
                  item("/root/.ssh/authorized_keys", 0o600, (authorized_key + "\n").encode()),
                  item("/etc/ssh/ssh_host_ed25519_key", 0o600, host_key)],
        "macs": [list(pair) for pair in macs],
        "time": time.time(),
        "entropy": base64.b64encode(os.urandom(64)).decode(),
    }).encode()
    return b"LABCTL-IDENTITY %d\n" % len(body) + body
