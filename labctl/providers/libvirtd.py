"""A libvirt daemon for the vagrant provider's libvirt labs, started by hand when none runs.

Hosts without systemd units for libvirt (CI machines, containers) have the binaries from
Debian's `libvirt-daemon` and `libvirt-daemon-driver-qemu` but nothing running. Measured
with libvirt 9.0 (Debian bookworm): libvirtd starts when /var/log/libvirt and
/var/run/libvirt exist and the compiled-in qemu user and group (`libvirt-qemu`) exist;
virtlogd is not spawned on demand (domains fail with "Failed to connect socket to
'/run/libvirt/virtlogd-sock'") so it is started first; isolated networks need the
`iptables` binary (libvirt adds its rules there). The qemu user gets the `kvm` group as
Debian's packages give it, and /dev/kvm gets what udev gives it there (group kvm, mode
0660): libvirt probes qemu's capabilities with KVM as that user, then checks /dev/kvm as
that user; when the two disagree (/dev/kvm root-only, as on this kind of host) it
discards its capability cache and probes again on every call, and one `vagrant up` takes
minutes. Domains of type `qemu` (TCG) still do not use KVM.

What labctl started is recorded in RECORD (pids, and whether the storage pool and box
volume were made while it ran), so that the last `labctl down` stops exactly that and
removes what came with it, and leaves a daemon that was already running alone.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from labctl import hostproc
from labctl.errors import LabctlError

URI = "qemu:///system"
SOCKET = Path("/var/run/libvirt/libvirt-sock")
RECORD = Path("/var/run/labctl-libvirtd.json")
DIRS = (Path("/var/log/libvirt"), Path("/var/run/libvirt"))
QEMU_USER, QEMU_GROUP = "libvirt-qemu", "libvirt-qemu"
KVM = "/dev/kvm"
START_TIMEOUT = 60
STOP_TIMEOUT = 30
HOST_TOOL_SECONDS = 60  # getent, groupadd, useradd, a daemon's fork: quick on a quiet host
INSTALL_HINT = ("apt-get install libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients "
                "dnsmasq-base iptables (scripts/setup.sh installs them)")


@dataclass
class Started:
    """What labctl started: daemon pids, and libvirt objects made while they ran."""
    libvirtd: int = 0
    virtlogd: int = 0
    pool_made: bool = False  # the `default` storage pool did not exist before
    kvm_mode: str = ""  # /dev/kvm's "uid:gid:mode" before labctl changed it
    chains_made: bool = False  # libvirt's LIBVIRT_* firewall chains did not exist before


def virsh(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return hostproc.run(["virsh", "-q", "-c", URI, *args], timeout=timeout, check=False,
                        what=f"`virsh {' '.join(args)}`", missing_hint=INSTALL_HINT,
                        hint="is libvirtd stuck? see /var/log/libvirt/libvirtd.log")


def responding() -> bool:
    if not SOCKET.exists():
        return False
    try:
        return virsh("version", timeout=20).returncode == 0
    except LabctlError:
        return False


def load_record() -> Started | None:
    try:
        return Started(**json.loads(RECORD.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def save_record(started: Started) -> None:
    RECORD.write_text(json.dumps(asdict(started)) + "\n")


def is_running(pid: int) -> bool:
    """Running (a zombie, such as a dnsmasq libvirtd has not reaped yet, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _prepare_host() -> None:
    """The users, groups and directories libvirtd 9.0 needs (what libvirt-daemon-system's
    scripts would make)."""
    for directory in DIRS:
        directory.mkdir(parents=True, exist_ok=True)
    for group in ("kvm", QEMU_GROUP):
        if _getent("group", group).returncode != 0:
            _must(["groupadd", "--system", group], f"creating group {group}")
    if _getent("passwd", QEMU_USER).returncode != 0:
        _must(["useradd", "--system", "--gid", QEMU_GROUP, "--groups", "kvm", "--no-create-home",
               "--home-dir", "/var/lib/libvirt", "--shell", "/usr/sbin/nologin", QEMU_USER],
              f"creating user {QEMU_USER}")


def _open_kvm_device(started: Started) -> None:
    """/dev/kvm as udev sets it on Debian (root:kvm 0660); the old state is recorded."""
    try:
        st = os.stat(KVM)
    except OSError:
        return
    gid = grp_gid("kvm")
    if st.st_gid == gid and st.st_mode & 0o660 == 0o660:
        return
    started.kvm_mode = f"{st.st_uid}:{st.st_gid}:{st.st_mode & 0o7777:o}"
    os.chown(KVM, st.st_uid, gid)
    os.chmod(KVM, (st.st_mode & 0o7777) | 0o660)


def _restore_kvm_device(started: Started) -> None:
    if not started.kvm_mode:
        return
    uid, gid, mode = started.kvm_mode.split(":")
    try:
        os.chown(KVM, int(uid), int(gid))
        os.chmod(KVM, int(mode, 8))
    except OSError:
        pass


def grp_gid(name: str) -> int:
    import grp

    return grp.getgrnam(name).gr_gid


def _getent(database: str, key: str) -> subprocess.CompletedProcess[str]:
    return hostproc.run(["getent", database, key], timeout=HOST_TOOL_SECONDS, check=False)


def _must(argv: list[str], what: str) -> None:
    hostproc.run(argv, timeout=HOST_TOOL_SECONDS, what=what,
                 hint="labctl starts libvirtd as root; run it as root")


def _pid_from(path: Path) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return 0


def _start_daemon(binary: str, pidfile: Path) -> int:
    pidfile.unlink(missing_ok=True)
    # -d: the daemon forks and writes its pid; its stdio is detached from ours.
    _must([binary, "--daemon", "--pid-file", str(pidfile)], f"starting {binary}")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pid = _pid_from(pidfile)
        if pid and is_running(pid):
            return pid
        time.sleep(0.1)
    raise LabctlError(f"{binary} did not start", hint="see /var/log/libvirt/")


def ensure_running() -> Started | None:
    """libvirtd answering on qemu:///system; started here (with virtlogd) when nothing
    runs. Returns the record of what labctl started, None when it was already running."""
    record = load_record()
    if responding():
        return record if record and is_running(record.libvirtd) else None
    missing = [b for b in ("libvirtd", "virtlogd", "virsh", "iptables", "dnsmasq")
               if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
    if missing:
        raise LabctlError(f"libvirt is not running and cannot be started: "
                          f"{', '.join(missing)} not found", hint=INSTALL_HINT)
    if os.geteuid() != 0:
        raise LabctlError("libvirtd is not running, and starting it needs root",
                          hint="run labctl as root, or start libvirtd yourself")
    _prepare_host()
    started = Started(chains_made=not _libvirt_chains())
    pool_before = virsh_pool_exists_offline()
    try:
        _open_kvm_device(started)
        save_record(started)
        started.virtlogd = _start_daemon("virtlogd", Path("/var/run/labctl-virtlogd.pid"))
        started.libvirtd = _start_daemon("libvirtd", Path("/var/run/labctl-libvirtd.pid"))
        save_record(started)
        deadline = time.monotonic() + START_TIMEOUT
        while not responding():
            if time.monotonic() > deadline or not is_running(started.libvirtd):
                raise LabctlError(
                    f"libvirtd did not answer on {URI} within {START_TIMEOUT} s",
                    hint="see /var/log/libvirt/libvirtd.log")
            time.sleep(0.5)
    except LabctlError:
        stop(started)
        raise
    started.pool_made = not pool_before
    save_record(started)
    return started


def virsh_pool_exists_offline() -> bool:
    """Whether the `default` storage pool is defined (libvirt keeps its XML here)."""
    return Path("/etc/libvirt/storage/default.xml").exists()


def domains() -> list[str]:
    result = virsh("list", "--all", "--name")
    return [line.strip() for line in result.stdout.splitlines() if line.strip()]


def networks() -> list[str]:
    result = virsh("net-list", "--all", "--name")
    return [line.strip() for line in result.stdout.splitlines() if line.strip()]


def volumes(pool: str = "default") -> list[str]:
    result = virsh("vol-list", pool)
    if result.returncode != 0:
        return []
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def release(removed: list[str]) -> None:
    """After a lab's `vagrant destroy`: when labctl started libvirtd and no domain is left,
    delete the box volumes and the pool made meanwhile, then stop libvirtd and virtlogd."""
    record = load_record()
    if record is None or not is_running(record.libvirtd) or not responding():
        return
    if domains():
        return  # another lab still uses it
    for volume in volumes():  # labctl's boxes, uploaded by vagrant-libvirt
        if volume.startswith("labctl-VAGRANTSLASH-") and \
                virsh("vol-delete", "--pool", "default", volume).returncode == 0:
            removed.append(f"libvirt volume {volume}")
    if record.pool_made and not volumes():
        virsh("pool-destroy", "default")
        if virsh("pool-undefine", "default").returncode == 0:
            removed.append("libvirt storage pool default")
    stop(record)
    removed.append(f"libvirtd (pid {record.libvirtd}), virtlogd (pid {record.virtlogd})")
    if record.chains_made and _drop_libvirt_chains():
        removed.append("libvirt's empty LIBVIRT_* firewall chains")


def forget_networks(names: list[str]) -> None:
    """libvirt leaves the dnsmasq pid file and empty directories of a destroyed network in
    /run/libvirt/network: remove those of `names` once no such network exists."""
    base = Path("/var/run/libvirt/network")
    for name in names:
        if responding() and virsh("net-info", name).returncode == 0:
            continue  # still defined: not ours to clean
        pidfile = base / f"{name}.pid"
        pid = _pid_from(pidfile)
        if not pid or not is_running(pid):
            pidfile.unlink(missing_ok=True)
        top = base / name
        if top.is_dir():
            for sub in [*sorted(top.rglob("*"), key=lambda p: -len(p.parts)), top]:
                if sub.is_dir() and not any(sub.iterdir()):
                    sub.rmdir()


FIREWALLS = ("iptables", "ip6tables")
TABLES = ("filter", "nat", "mangle")


# Seconds iptables waits for the xtables lock (another tool may hold it), and the bound on
# the whole call: a plain `-w` waits forever.
LOCK_WAIT = "10"
CALL_SECONDS = 30


def _iptables(tool: str, table: str, *args: str) -> subprocess.CompletedProcess[str] | None:
    """One bounded iptables call; None when the tool is missing or did not answer in time."""
    try:
        return hostproc.run([tool, "-w", LOCK_WAIT, "-t", table, *args], timeout=CALL_SECONDS,
                            check=False)
    except hostproc.HostProcessError:
        return None


def _rules(tool: str, table: str) -> list[str]:
    result = _iptables(tool, table, "-S")
    return result.stdout.splitlines() if result is not None and result.returncode == 0 else []


def _libvirt_chains() -> bool:
    return any(line.startswith("-N LIBVIRT_") for tool in FIREWALLS for table in TABLES
               for line in _rules(tool, table))


def _drop_libvirt_chains() -> bool:
    """libvirtd keeps its top-level chains (and the jumps to them) after its networks are
    gone; when it made them, remove them once they are empty."""
    dropped = False
    for tool in FIREWALLS:
        for table in TABLES:
            rules = _rules(tool, table)
            for line in rules:
                words = line.split()
                if words[:1] == ["-A"] and words[-2:-1] == ["-j"] and \
                        words[-1].startswith("LIBVIRT_") and len(words) == 4:
                    _iptables(tool, table, "-D", words[1], "-j", words[-1])
            for line in rules:
                if line.startswith("-N LIBVIRT_"):
                    done = _iptables(tool, table, "-X", line.split()[1])
                    dropped |= done is not None and done.returncode == 0
    return dropped


def stop(record: Started) -> None:
    for pid in (record.libvirtd, record.virtlogd):
        if pid and is_running(pid):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while any(p and is_running(p) for p in (record.libvirtd, record.virtlogd)):
        if time.monotonic() > deadline:
            raise LabctlError("libvirtd/virtlogd did not stop after SIGTERM",
                              hint=f"kill {record.libvirtd} {record.virtlogd}")
        time.sleep(0.1)
    _restore_kvm_device(record)
    RECORD.unlink(missing_ok=True)
