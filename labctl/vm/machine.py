"""One qemu VM, as the qemu provider's nodes and the Docker host VM both run it.

A QemuMachine owns one directory: qcow2 overlay on the image's root disk, an initrd
(the image's stage 1 plus this machine's payload: settings, node-side code, ssh keys),
boot/ (copies of the image's kernel and that initrd, which qemu boots from and which are
emptied once it is ready), the serial console log, qemu's own output, its QMP socket and
pidfile. It plans its argv (machine_argv, plain data: golden-tested through the qemu
provider's plan), launches qemu with tap file descriptors, tells whether a pid is its
qemu (exactly: the `-pidfile` argument in /proc/PID/cmdline is this machine's pidfile, so
node1 never matches node10, nor lab rv's node x-node1 lab rv-x's node1), stops it (TERM,
then KILL, and returns only once it is gone), reads its console's boot report and opens
its ssh master.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import shutil
import signal
import socket
import stat
import subprocess
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labctl import bounded, hostproc, safefs
from labctl.errors import LabctlError
from labctl.images.builder import Image
from labctl.images.cpio import CpioWriter
from labctl.images.kernels import MODULES_DEVICE, PreparedKernel
from labctl.net import labnet
from labctl.node import ssh
from labctl.node.env import env_file, mgmt_mac, node_code_files
from labctl.node.procs import argv_of, has_option, pids_with_option
from labctl.node.ready import FAIL, STAGE, ready_line, record_ready
from labctl.nodeside import NODE_CODE
from labctl.progress import Progress
from labctl.store.state import LabState, TapState
from labctl.testpoints import fault_point
from labctl.topology.resolved import Lab, Node
from labctl.vm.qmp import qmp_command
from labctl.vm.ramguard import PunchHoleGuard

TB_SIZE_MIB = 32  # TCG translation cache: qemu's default (1 GiB) dominates RSS; 16 thrashes
STOP_TERM_SECONDS = 10.0
STOP_KILL_SECONDS = 5.0
QUICK_TOOL_SECONDS = 60.0  # ssh-keygen, qemu-img create, setsid -f: instant on a quiet host


@dataclass(frozen=True)
class Share:
    """A host folder exported to the machine over virtio-9p (qemu's own server, no daemon;
    the node mounts it by its tag)."""

    tag: str  # mount_tag, at most 31 bytes
    path: str  # absolute host path
    readonly: bool


def share_tag(index: int) -> str:
    return f"labctl{index}"


def mounts_env(node: Node) -> dict[str, str]:
    """LABCTL_MOUNTS for node-init.sh: "TAG,DST,MODE" words (DSTs are plain, see
    labctl.topology.workbench); nothing when the node has no mounts."""
    if not node.mounts:
        return {}
    return {"LABCTL_MOUNTS": " ".join(
        f"{share_tag(i)},{m.target},{'ro' if m.readonly else 'rw'}"
        for i, m in enumerate(node.mounts))}


@dataclass(frozen=True)
class Nic:
    netdev: str  # qemu netdev id = the interface name in the node
    mac: str
    tap: str  # the tap's name: "{fd:TAP}" in the argv until launch


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for a machine's ssh forward."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# A console log is written by the guest and can be any size: labctl reads its first MiB
# (the boot, with its ready or fail line: a few KiB with `quiet`) and its last 64 KiB.
CONSOLE_HEAD_BYTES = 1 << 20
CONSOLE_TAIL_BYTES = 64 << 10


def tail(path: Path, lines: int = 25) -> str:
    try:
        text = bounded.read_tail(path, CONSOLE_TAIL_BYTES)
    except (OSError, bounded.BoundedError):
        return "(no output)"
    return "".join(text.splitlines(keepends=True)[-lines:])


def machine_payload(env: dict[str, str], authorized_key: str | None,
                    host_key: bytes | None) -> bytes:
    """The cpio appended to the image's initrd: stage 1 copies payload/ onto the root disk.
    Without keys (a machine saved for restores): they come with the node's identity."""
    archive = CpioWriter()
    for rel, path in node_code_files():
        mode = 0o755 if path.suffix == ".sh" else 0o644
        archive.file(f"payload{NODE_CODE}/{rel}", path.read_bytes(), mode)
    archive.file("payload/etc/labctl/node.env", env_file(env))
    # sshd's files where it reads them, with their modes: no program to place them at boot
    # (each costs a node tens of ms under TCG). Parents first, else /root would get 0755.
    archive.directory("payload/root", 0o700)
    archive.directory("payload/root/.ssh", 0o700)
    if authorized_key is not None:
        archive.file("payload/root/.ssh/authorized_keys", (authorized_key + "\n").encode(),
                     0o600)
    if host_key is not None:  # the host key labctl made for this node: known_hosts pins it
        archive.file("payload/etc/ssh/ssh_host_ed25519_key", host_key, 0o600)
    archive.file("payload/etc/ssh/sshd_config.d/00-labctl.conf", SSHD_CONFIG.encode())
    return archive.render()


# The options node-init.sh starts sshd with, also in its config so that `sshd -T` and any
# sshd started later agree: keys only, no PAM (its modules start programs at every login).
SSHD_CONFIG = """PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
PrintLastLog no
"""


PR_SET_THP_DISABLE = 41  # prctl(2)
# The files qemu boots from, each named by its option (-kernel, -initrd): copied into
# boot/ at every launch, emptied at ready (QemuMachine._boot_copies, release_boot_files).
BOOT_FILES = ("kernel", "initrd")


def virtio_nic(netdev: str, mac: str) -> str:
    """A node NIC's -device value. romfile= (none): no iPXE option ROM in qemu's memory
    and the guest's, for a machine that boots its kernel directly."""
    return f"virtio-net-pci,netdev={netdev},mac={mac},romfile="


def uses_tcg(argv: list[str]) -> bool:
    """True if the qemu argv emulates (TCG), as without -accel qemu does."""
    return "-accel" not in argv or argv[argv.index("-accel") + 1].startswith("tcg")


def inherit_thp(*, enabled: bool) -> None:
    """Whether the programs labctl starts from now on may use transparent huge pages (the
    setting passes to children and through exec; labctl's own process has it too, which it
    does not need). For a TCG qemu: no. qemu asks for huge pages for guest RAM, and the
    host's khugepaged then fills each 2 MiB range the guest has touched at all into a whole
    huge page, undoing free page reporting: a node's RSS crept from 202 to 227 MiB in two
    minutes, idle (docs/performance.md). Under KVM, huge pages speed up the guest's memory
    access; under TCG, qemu's own software TLB stands between the guest and its RAM."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_THP_DISABLE, int(not enabled), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_THP_DISABLE)")


@dataclass(frozen=True)
class Restore:
    """What a saved machine (labctl.vm.saved) adds to a node's argv: its RAM, a file, and
    the serial port its identity comes through; when restoring, qemu waits for the saved
    device state (-incoming defer: labctl.vm.restore sends it) instead of booting. Saving
    and restoring machines have the same devices, in order.

    The machine being saved writes its RAM through to the file (share=on), and its state
    leaves the RAM out (x-ignore-shared). A restored node maps that file privately (copy on
    write): what it only reads stays one page-cache copy for every node restored from it
    (docs/lifecycle.md; labctl.vm.ramguard keeps qemu from punching holes in it)."""

    ram: Path
    state: Path | None  # None: the machine that is being saved

    @property
    def restoring(self) -> bool:
        return self.state is not None

    def argv(self, identity_socket: Path, memory_mib: int) -> list[str]:
        share = "off" if self.restoring else "on"
        argv = ["-object", f"memory-backend-file,id={RAM_ID},size={memory_mib}M,"
                f"mem-path={_qemu_value(self.ram)},share={share}",
                "-machine", f"memory-backend={RAM_ID}",
                "-chardev", f"socket,id=identity,path={_qemu_value(identity_socket)},"
                "server=on,wait=off", "-serial", "chardev:identity"]
        if self.restoring:
            argv += ["-incoming", "defer"]
        return argv


# sizeof(sockaddr_un.sun_path) is 108, its last byte the NUL
SOCKET_PATH_MAX = 107
ROOT_DISK_SERIAL = "labctl-root"
RAM_ID = "ram"  # the guest RAM block's name in the saved state: both sides use it


def maps_ram_file_privately(argv: list[str]) -> bool:
    """Whether qemu `argv` maps a RAM file copy on write (a restored node's saved RAM)."""
    return any(flag == "-object" and value.startswith("memory-backend-file,")
               and "share=off" in value.split(",") for flag, value in itertools.pairwise(argv))


class QemuMachine:
    def __init__(self, directory: Path, guest: str, root: Path | None = None) -> None:
        self.dir = directory
        self.guest = guest  # qemu's -name guest=...: what `ps` shows
        # The directory labctl trusts (a lab directory, the saved machines' folder): no
        # link below it is followed when the machine's files are made or written.
        self.root = root or directory.parent

    # --- files ---------------------------------------------------------------------------
    @property
    def console_log(self) -> Path:
        return self.dir / "console.log"

    @property
    def qemu_log(self) -> Path:
        return self.dir / "qemu.log"

    @property
    def pidfile(self) -> Path:
        return self.dir / "qemu.pid"

    @property
    def qmp_socket(self) -> Path:
        return self.dir / "qmp.sock"

    @property
    def helper_log(self) -> Path:
        """What went wrong starting the inspector's helper from the host (see start_detached);
        the helper's own log is the node's /run/labctl-verbs-helper.log."""
        return self.dir / "helper-start.log"

    @property
    def initrd(self) -> Path:
        return self.dir / "initrd"

    @property
    def boot_dir(self) -> Path:
        """What this qemu boots from: copies of its kernel and initrd made at each launch,
        emptied once the machine is ready (release_boot_files)."""
        return self.dir / "boot"

    @property
    def disk(self) -> Path:
        return self.dir / "disk.qcow2"

    @property
    def identity_socket(self) -> Path:
        """A saved or restored machine's second serial port (ttyS1): labctl sends the node
        its identity there (labctl/nodeside/identity.py)."""
        return self.dir / "identity.sock"

    @property
    def host_key(self) -> Path:
        return self.dir / "ssh_host_ed25519_key"

    # --- the argv plan -------------------------------------------------------------------
    def argv(self, *, accel: str, memory_mib: int, cpus: int, kernel: Path, append: str,
             ssh_port: int, mgmt_mac: str, nics: list[Nic],
             extra_drives: tuple[str, ...] = (), shares: tuple[Share, ...] = (),
             restore: Restore | None = None, tb_size_mib: int = TB_SIZE_MIB) -> list[str]:
        accel_args = (["-accel", "kvm", "-cpu", "host"] if accel == "kvm"
                      else ["-accel", f"tcg,tb-size={tb_size_mib}"])
        argv = [
            "qemu-system-x86_64", "-name", f"guest={self.guest}", "-machine", "pc",
            *accel_args, "-m", str(memory_mib), "-smp", str(cpus), "-nodefaults",
            "-no-user-config", "-display", "none", "-no-reboot",
            "-kernel", str(kernel), "-initrd", str(self.initrd), "-append", append,
            # The root disk, the first virtio device (/dev/vda). Its serial gives it
            # /dev/disk/by-id/virtio-labctl-root (udev makes by-id links of virtio disks
            # from their serial, and none without one); qemu takes a serial on the device.
            "-drive", f"file={_qemu_value(self.disk)},if=none,id=root,format=qcow2,"
            "cache=unsafe",
            "-device", f"virtio-blk-pci,drive=root,serial={ROOT_DISK_SERIAL}",
        ]
        # after the root disk: /dev/vdb, ... (qemu adds if=virtio drives after every -device)
        for drive in extra_drives:
            argv += ["-drive", drive]
        argv += [
            "-netdev", f"user,id=mgmt,restrict=on,hostfwd=tcp:127.0.0.1:{ssh_port}-:22",
            "-device", virtio_nic("mgmt", mgmt_mac),
            # host entropy: the node's CRNG is ready at once (sshd would wait for it)
            "-device", "virtio-rng-pci",
            # free page reporting: what the guest frees leaves qemu's RSS (see KERNEL_APPEND)
            "-device", "virtio-balloon-pci,free-page-reporting=on",
        ]
        for i, share in enumerate(shares):
            path = _qemu_value(share.path)
            # multidevs=remap: a folder holding other file systems (bind mounts) keeps
            # unique inode numbers in the node
            argv += ["-fsdev", f"local,id=fs{i},path={path},security_model=none,"
                     "multidevs=remap"
                     + (",readonly=on" if share.readonly else ""),
                     "-device", f"virtio-9p-pci,fsdev=fs{i},mount_tag={share.tag}"]
        for nic in nics:
            argv += ["-netdev", f"tap,id={nic.netdev},fd={{fd:{nic.tap}}}",
                     "-device", virtio_nic(nic.netdev, nic.mac)]
        argv += [
            "-serial", f"file:{self.console_log}",
        ]
        if restore is not None:
            argv += restore.argv(self.identity_socket, memory_mib)
        argv += [
            "-qmp", f"unix:{_qemu_value(self.qmp_socket)},server=on,wait=off",
            "-pidfile", str(self.pidfile),
        ]
        return argv

    # --- making it -----------------------------------------------------------------------
    def make_host_key(self) -> str:
        """A fresh ed25519 host key for the machine (into its payload); its public line."""
        safefs.make_dirs(self.dir, self.root)
        for path in (self.host_key, self.host_key.with_suffix(".pub")):
            safefs.unlink(path, self.root)
        hostproc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", self.guest,
                      "-f", str(self.host_key)], timeout=QUICK_TOOL_SECONDS,
                     what=f"ssh-keygen (the host key of {self.guest})",
                     missing_hint="apt-get install openssh-client")
        public = safefs.read_bytes(self.host_key.with_suffix(".pub"), self.root, 4096)
        return public.decode(errors="replace").strip()

    def make_disk(self, rootfs: Path) -> None:
        safefs.make_dirs(self.dir, self.root)
        safefs.unlink(self.disk, self.root)
        hostproc.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(rootfs), "-F",
                      "raw", str(self.disk)], timeout=QUICK_TOOL_SECONDS,
                     what=f"qemu-img create (the disk of {self.guest})",
                     missing_hint="apt-get install qemu-utils")

    def make_initrd(self, stage1: Path, payload: bytes) -> None:
        # 0600: the payload holds the node's host key
        safefs.write_bytes(self.initrd, stage1.read_bytes() + payload, self.root, 0o600)

    # --- running it ----------------------------------------------------------------------
    def launch(self, argv: list[str], taps: list[TapState], netns: str, node: str) -> int:
        """Start qemu with fresh taps in `netns` and fresh copies of the argv's kernel and
        initrd; return its pid once /proc shows its argv."""
        self._check_socket_paths()
        self._fresh_logs()
        real = self._boot_copies(argv)
        fds: dict[str, int] = {}
        try:
            for tap in taps:
                fds[tap.name] = labnet.open_tap(netns, tap.name, tap.bridge, tap.mtu)
            for name, fd in fds.items():
                real = [a.replace(f"{{fd:{name}}}", str(fd)) for a in real]
            inherit_thp(enabled=not uses_tcg(real))
            # a restored node maps the saved RAM file: qemu must not punch holes in it
            guard = PunchHoleGuard() if maps_ram_file_privately(real) else None
            with os.fdopen(safefs.create(self.qemu_log, self.root), "wb") as log:
                proc = subprocess.Popen(real, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True,
                                        pass_fds=tuple(fds.values()), preexec_fn=guard)
        finally:
            for fd in fds.values():
                os.close(fd)
        fault_point("qemu-started", node)
        # Popen can return before the kernel shows qemu's argv in /proc: wait for it, or
        # the first liveness check would take a starting machine for a dead one.
        for _ in range(200):
            if proc.poll() is not None or self.owns(proc.pid):
                break
            time.sleep(0.01)
        return proc.pid

    def _check_socket_paths(self) -> None:
        """qemu binds its sockets in the machine's directory: a path longer than a socket
        address holds (108 bytes with its NUL) is qemu's exit at start, said here instead."""
        for sock in (self.qmp_socket, self.identity_socket):
            size = len(os.fsencode(sock))
            if size > SOCKET_PATH_MAX:
                raise LabctlError(
                    f"cannot start {self.guest}: its socket {sock} is {size} bytes long, more "
                    f"than the {SOCKET_PATH_MAX} a Unix socket's path can have",
                    hint="give LABCTL_STATE_DIR (or LABCTL_CACHE_DIR) a shorter path")

    def _fresh_logs(self) -> None:
        """A new, empty console.log that labctl made (the previous boot's kept as
        console.log.1), and no qemu.pid: qemu opens both by name itself, so a link planted
        there would have it create or write the file the link names."""
        with contextlib.suppress(FileNotFoundError, safefs.NotLabctls):
            previous = safefs.lstat_beneath(self.console_log, self.root)
            if stat.S_ISREG(previous.st_mode) and previous.st_size:
                safefs.replace(self.console_log, self.dir / "console.log.1", self.root)
        os.close(safefs.create(self.console_log, self.root, 0o640))
        safefs.unlink(self.pidfile, self.root)

    def _boot_copies(self, argv: list[str]) -> list[str]:
        """`argv` booting copies of its -kernel and -initrd files, made now."""
        real = list(argv)
        safefs.make_dirs(self.boot_dir, self.root)
        for name in BOOT_FILES:
            at = real.index(f"-{name}") + 1
            copy, source = self.boot_dir / name, Path(real[at])
            # the node's own initrd is under the lab directory: read without links too
            safefs.copy_file(source, copy, self.root, 0o600,
                             self.root if source.is_relative_to(self.root) else None)
            real[at] = str(copy)
        return real

    def release_boot_files(self) -> None:
        """Empty the copies of the kernel and initrd the running qemu booted from.

        qemu maps both files whole and keeps them mapped, to load them into the guest again
        at a reset: 56 MiB of the PVH `vmlinux` and 5.5 MiB of initrd in each node's RSS.
        labctl's machines never reset in place (`-no-reboot`: a reboot ends qemu, and a
        restart launches a new qemu on new copies), so these pages are dead weight.
        Truncating a file takes its pages out of qemu's mapping and out of the host's page
        cache; the copies are the machine's own, because the originals (the image's kernel,
        the node's initrd) must stay whole for the next launch."""
        for name in BOOT_FILES:
            safefs.truncate(self.boot_dir / name, self.root)

    def owns(self, pid: int) -> bool:
        """True if `pid` runs and is this machine's qemu (not a recycled pid, not a
        machine whose name merely contains ours)."""
        if pid <= 0:
            return False
        argv = argv_of(pid)
        want = str(self.pidfile).encode()
        return argv is not None and has_option(argv, b"-pidfile", lambda value: value == want)

    def pidfile_pid(self) -> int:
        """The pid qemu wrote to its -pidfile (0 if none)."""
        try:  # a regular file of a few bytes, or no pid (a FIFO there never blocks)
            text = bounded.read_text(self.pidfile, 64).strip()
        except (OSError, ValueError):
            return 0
        return int(text) if text.isdigit() and len(text) < 10 else 0

    def stop(self, pid: int) -> bool:
        """Stop this machine's qemu `pid`; return once it has exited. False if not ours."""
        if not self.owns(pid):
            return False
        for sig, seconds in ((signal.SIGTERM, STOP_TERM_SECONDS),
                             (signal.SIGKILL, STOP_KILL_SECONDS)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            deadline = time.monotonic() + seconds
            while self.owns(pid) and time.monotonic() < deadline:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)  # our child (in-process up): reap it
                time.sleep(0.02)
            if not self.owns(pid):
                break
        else:
            raise LabctlError(f"qemu {self.guest} (pid {pid}) did not exit after SIGKILL",
                              hint="it may be stuck in the kernel (D state); see `ps`")
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)  # reap it if it is our child: no zombie left
        return True

    def qmp(self, command: str, **arguments: Any) -> Any:
        return qmp_command(self.qmp_socket, command, **arguments)

    # --- its console ---------------------------------------------------------------------
    def console(self) -> str:
        """The console's start and end (never the whole log: the guest writes it)."""
        try:
            return bounded.read_ends(self.console_log, CONSOLE_HEAD_BYTES, CONSOLE_TAIL_BYTES)
        except (OSError, bounded.BoundedError):
            return ""

    def stage(self, console: str) -> str:
        found = [ln for ln in console.splitlines() if ln.startswith(STAGE)]
        return found[-1].removeprefix(STAGE).split(" [")[0] if found else "boot"

    def failure(self, what: str, reason: str) -> LabctlError:
        return LabctlError(
            f"{what}: {reason}\n--- console tail ({self.console_log}) ---\n"
            f"{tail(self.console_log)}--- qemu output ---\n{tail(self.qemu_log, 10)}",
            hint="fix the cause, then `labctl down` removes what was made",
        )

    def exit_reason(self, ssh_port: int) -> str:
        log = tail(self.qemu_log)
        if "host forwarding" in log:
            return f"management port 127.0.0.1:{ssh_port} is in use"
        return "qemu exited"

    def boot_failed(self, console: str) -> str | None:
        """The reason the machine's init gave for a failed step, if it did."""
        if FAIL not in console:
            return None
        return console[console.index(FAIL):].splitlines()[0].removeprefix(FAIL).strip()

    @staticmethod
    def is_ready(console: str) -> bool:
        return ready_line(console) is not None

    # --- management connection -----------------------------------------------------------
    def start_master(self, ssh_config: Path, host: str, deadline: float, what: str) -> None:
        """A persistent ssh connection makes every later exec cheap."""
        try:
            ssh.start_master(ssh_config, host, deadline)
        except ssh.MasterError as exc:
            raise self.failure(what, f"ssh does not answer: {exc}") from None


def qemu_pids_in(labdir: Path) -> list[int]:
    """Pids of the qemu processes of the lab directory `labdir` (their -pidfile is
    LABDIR/nodes/NODE/qemu.pid), found in /proc: for counting, not for identity checks."""
    nodes = labdir / "nodes"
    return pids_with_option(
        b"-pidfile", lambda value: Path(value.decode(errors="replace")).parent.parent == nodes)


def check_qemu_host() -> None:
    if os.geteuid() != 0:
        raise LabctlError(
            "the qemu provider needs root (network namespaces, taps)",
            hint="run labctl with sudo or as root",
        )
    for tool, package in (
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("qemu-img", "qemu-utils"),
        ("ssh", "openssh-client"),
    ):
        if shutil.which(tool) is None:
            raise LabctlError(f"{tool} not found", hint=f"apt-get install {package}")
    if not os.access("/dev/net/tun", os.R_OK | os.W_OK):
        raise LabctlError("/dev/net/tun is not usable", hint="modprobe tun, run as root")


def node_machine(lab_name: str, node: str, node_dir: Path) -> QemuMachine:
    # node_dir is LABDIR/nodes/NODE: no link below the lab directory is followed
    return QemuMachine(node_dir, f"labctl-{lab_name}-{node}", node_dir.parent.parent)


# The node kernel's command line. cryptomgr.notests: the kernel's self-tests of its crypto
# algorithms took about 1 s of a TCG node's boot (measured, docs/performance.md); they
# verify the kernel's own code at every boot, which a lab node need not repeat.
# page_reporting_order=0: the balloon reports every free page, not only whole 2 MiB
# blocks (the default), which a node's scattered frees seldom make (docs/performance.md).
# net.ifnames=0: the node runs udev (node-init.sh), which keeps the kernel's ethN names
# with it instead of renaming NICs to ens2, ens6 ... (Debian's documented switch).
KERNEL_APPEND = ("console=ttyS0 quiet loglevel=3 panic=-1 cryptomgr.notests"
                 " page_reporting.page_reporting_order=0 net.ifnames=0")


def node_argv(lab: Lab, node: Node, machine: QemuMachine, image: Image, accel: str,
              port: int, extra_drives: tuple[str, ...] = (),
              restore: Restore | None = None, tb_size_mib: int = TB_SIZE_MIB,
              kernel: PreparedKernel | None = None) -> list[str]:
    """One node's qemu argv (the Docker host VM adds its data disk; a restored node its
    saved state; a node on a kernel of its own boots it, its modules disk next to the
    root disk)."""
    if kernel is not None:
        extra_drives = (modules_drive(kernel.modules_disk), *extra_drives)
    nics = [Nic(i.name, i.mac, labnet.tap_name(node.index, i.name)) for i in node.interfaces]
    shares = tuple(Share(share_tag(i), m.source, m.readonly) for i, m in enumerate(node.mounts))
    return machine.argv(
        accel=accel, memory_mib=node.memory_mib, cpus=node.cpus,
        kernel=image.kernel if kernel is None else kernel.boot,
        append=KERNEL_APPEND + f" labctl.node={node.name}",
        ssh_port=port, mgmt_mac=mgmt_mac(lab.name, node), nics=nics, extra_drives=extra_drives,
        shares=shares, restore=restore, tb_size_mib=tb_size_mib)


def modules_drive(disk: Path) -> str:
    """The read-only disk of a kernel's modules (node-init.sh mounts it; shared by every
    node on that kernel, so qemu takes no write lock on it)."""
    return f"file={_qemu_value(disk)},if=virtio,format=raw,readonly=on"


def kernel_env(kernel: PreparedKernel | None) -> dict[str, str]:
    """LABCTL_KERNEL_MODULES for node-init.sh: the device of the modules disk; nothing for
    a node on the image's kernel."""
    return {} if kernel is None else {"LABCTL_KERNEL_MODULES": MODULES_DEVICE}


# The inspector's helper is started by labctl in VM nodes once every node is ready (the
# script says why), detached: `up` does not wait for its import of pyverbs, nor for the
# node's reclaim of its page cache after it (--vm).
START_HELPER = ["sh", f"{NODE_CODE}/labctl/nodeside/start-helper.sh", "--vm"]


def start_detached(argvs: dict[Path, list[str]], root: Path) -> None:
    """Start each command in the background (`setsid -f`: it outlives labctl) and return at
    once, its stderr appended to its log file (the key: under `root`, never through a
    link).

    For the inspector's helpers: waiting for four nodes' ssh sessions after bring-up cost
    `up` 2-5 s under TCG (each session slowed by the other nodes' helpers importing), and a
    node without its helper is only slower to inspect."""
    for log, argv in argvs.items():
        # setsid -f returns once the command is forked; a stuck start is only slower
        with os.fdopen(safefs.create(log, root, 0o640, append=True), "ab") as err, \
                contextlib.suppress(hostproc.HostProcessError):
            hostproc.run(["setsid", "-f", *argv], timeout=QUICK_TOOL_SECONDS,
                         capture=False, stderr=err, check=False)


# node-init.sh's stages after its ssh server listens: the ssh master can connect.
AFTER_SSHD = frozenset({"rdma"})


def wait_machines_ready(
    machines: dict[str, QemuMachine], state: LabState, ssh_config: Path, timeout: float,
    progress: Progress, what: str = "node",
) -> float:
    """Wait until every machine's console says ready (recording its facts) and its ssh
    master runs; raise with the console tail otherwise. Returns the seconds it took.

    Each master starts as soon as its machine's ssh server listens (the stages after
    "sshd"), while that machine and the others finish booting: a login costs a node a few
    tenths of a second under TCG (dropbear; about a second with OpenSSH's sshd), which then
    overlaps with the rest of the bring-up."""
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    pending = set(machines)

    def connect(name: str) -> None:
        machines[name].start_master(ssh_config, name, deadline, f"{what} {name}")
        fault_point("master", name)

    # Leaving the block waits for the masters being opened: none outlives a failure (the
    # caller's cleanup would miss it).
    with ThreadPoolExecutor(max_workers=len(machines) or 1) as pool:
        masters: list[Future[None]] = []
        connecting: set[str] = set()
        while pending:
            stages = {}
            for name in sorted(pending):
                machine, info = machines[name], state.nodes[name]
                console = machine.console()
                ready = machine.is_ready(console)
                stage = machine.stage(console)
                if name not in connecting and (ready or stage in AFTER_SSHD):
                    connecting.add(name)
                    masters.append(pool.submit(connect, name))
                if ready:
                    pending.discard(name)
                    record_ready(info, console)
                    machine.release_boot_files()
                    continue
                failed = machine.boot_failed(console)
                if failed is not None:
                    raise machine.failure(f"{what} {name}", failed)
                if not machine.owns(info.pid):
                    raise machine.failure(f"{what} {name}",
                                          machine.exit_reason(info.ssh_port))
                stages[name] = stage
            for master in masters:  # a node whose ssh failed: no need to wait for the rest
                if master.done():
                    master.result()
            if not pending:
                break
            if time.monotonic() > deadline:
                slow = sorted(pending)[0]
                raise machines[slow].failure(
                    f"{what} {slow}",
                    f"not ready after {timeout:.0f} s (last stage: {stages[slow]})")
            progress(f"booting ({time.monotonic() - started:.0f} s): "
                     + ", ".join(f"{n} {s}" for n, s in stages.items()))
            time.sleep(0.05)  # reading the consoles costs next to nothing
        fault_point("booted")
        progress("opening management connections")
        for master in masters:
            master.result()
    return time.monotonic() - started


def _qemu_value(value: str | Path) -> str:
    """A path inside a qemu option list: a comma in it is written twice (qemu's syntax),
    so a state dir such as /tmp/a,readonly=on can never add an option."""
    return str(value).replace(",", ",,")
