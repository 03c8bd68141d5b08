"""The Docker host VM: one qemu VM running a Docker engine, shared by every docker lab.

It exists for hosts whose kernel cannot give containers their own working rxe (or that
have no Docker engine). It is started on demand, reused across labs and stopped only by
`labctl docker-host down`. It is one QemuMachine (labctl/vm/machine.py), as a
qemu lab's node is: only its directory (/var/lib/labctl/docker-host, beside the labs, not
among them), its image (recipe `docker-host`) and a second disk differ. Its lock file
(docker-host.lock beside that directory) outlives the directory, so an `up` waiting for a
`down` to finish never holds a lock on a deleted file. The engine's unix socket is forwarded by the
node's ssh master to `docker.sock` in that directory (0600, root only): the Docker SDK and
CLI on the host use `unix://.../docker.sock`. Nothing listens on TCP.

The engine's data disk (/var/lib/docker: imported node images) is a sparse ext4 file in
labctl's cache, one per docker-host image, so a restarted VM finds its images again.

Several VMs can run at once (`labctl docker-host up --name N`, for multi-host labs): the
default one keeps the paths above; a named one lives in docker-host-N (lock
docker-host-N.lock, data disk IMAGEKEY.N.docker.ext4) and has a second NIC on the Docker
hosts' network (labctl/dockerhost/hostnet.py), which carries the swarm's traffic.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from labctl import hostproc
from labctl.data.recipes import recipe
from labctl.dockerhost import hostnet
from labctl.dockerhost.sdk import sdk
from labctl.errors import LabctlError, UsageError
from labctl.images.builder import Image, build_image
from labctl.locks import blocking_lock
from labctl.node import ssh
from labctl.node.env import node_env
from labctl.node.replies import read_reply
from labctl.paths import cache_root, docker_hosts_root
from labctl.progress import Progress
from labctl.store.labdir import LabDir
from labctl.store.state import CorruptStateError, LabState, NodeState, Phase, TapState, VmInfo
from labctl.topology.resolved import Interface, Lab, Mount, Node
from labctl.vm.accel import choose_accel
from labctl.vm.machine import (
    QemuMachine,
    free_port,
    machine_payload,
    mounts_env,
    node_argv,
    node_machine,
    wait_machines_ready,
)

IMAGE = "docker-host"
# Not a valid lab name (underscore): cannot collide with a user's lab, netns or qemu.
VM_LAB = "docker_host"
VM_NODE = "engine"
# This host's folders for container mounts: labctl bind-mounts each lab's under
# share_dir() at `up` (labctl.providers.docker), the VM sees that directory over
# virtio-9p (multidevs=remap: the bind mounts are other file systems) at VM_SHARE.
VM_SHARE = "/mnt/labctl-host"
DEFAULT_MEMORY_MIB = 1024
# 0 = automatic: 2 under KVM, 1 under TCG. With -smp 2 under TCG the 7.3 guest kernel
# panicked early in 2 of ~8 boots here ("Oops: int3" in ktime_get_mono_fast_ns while
# patching kernel text across vCPUs), so TCG gets one vCPU. Tried again 2026-11-26 (the
# 2-vCPU docker tests ran 35% faster): 30 boots of one VM alone passed, then two 2-vCPU
# VMs of a multi-host lab on this 2-core host died of the same Oops in runc (a static
# key flipped while containers started), so it stays one.
DEFAULT_CPUS = 0
DATA_DISK_SIZE = "20G"
MKFS_SECONDS = 300  # mkfs.ext4 of the sparse data disk: seconds; minutes on a busy host
REMOTE_SOCKET = "/run/docker.sock"
DEFAULT_NAME = "default"
# Short: it ends up in directory, lock and tap names (and a lab's `hosts:` may name it).
VM_NAME_RE = r"[a-z][a-z0-9]{0,7}"
DIR_PREFIX = "docker-host"


# docker-host-share (the host folders' share) sits beside the VMs' directories: "share"
# cannot name a VM.
SHARE_SUFFIX = "share"


def check_vm_name(name: str) -> str:
    if name != DEFAULT_NAME and not re.fullmatch(VM_NAME_RE, name):
        raise UsageError(f"bad Docker host VM name {name!r}",
                         hint="a lowercase letter then up to 7 of a-z, 0-9")
    if name == SHARE_SUFFIX:
        raise UsageError(f"bad Docker host VM name {name!r}: labctl's host-folder share "
                         "uses it", hint="choose another name")
    return name


def _dirname(name: str) -> str:
    return DIR_PREFIX if name == DEFAULT_NAME else f"{DIR_PREFIX}-{check_vm_name(name)}"


def share_dir() -> Path:
    """The host folders' share, one for every Docker host VM: they all run on this host."""
    return docker_hosts_root() / f"{DIR_PREFIX}-{SHARE_SUFFIX}"


def vm_dir(name: str = DEFAULT_NAME) -> LabDir:
    return LabDir(_dirname(name), root=docker_hosts_root())


def lock_file(name: str = DEFAULT_NAME) -> Path:
    return docker_hosts_root() / f"{_dirname(name)}.lock"


def data_disk(image: Image, name: str = DEFAULT_NAME) -> Path:
    infix = "" if name == DEFAULT_NAME else f".{name}"
    return cache_root() / "docker-host" / f"{image.path.name}{infix}.docker.ext4"


def vm_lab_name(name: str) -> str:
    return VM_LAB if name == DEFAULT_NAME else f"{VM_LAB}_{name}"


def vm_names() -> list[str]:
    """Every Docker host VM with a directory (running or left behind), default first."""
    root = docker_hosts_root()
    if not root.is_dir():
        return []
    names: list[str] = []
    for path in sorted(root.iterdir()):
        if not path.is_dir():
            continue
        if path.name == DIR_PREFIX:
            names.insert(0, DEFAULT_NAME)
        elif path.name.startswith(f"{DIR_PREFIX}-"):
            rest = path.name.removeprefix(f"{DIR_PREFIX}-")
            if re.fullmatch(VM_NAME_RE, rest) and rest != SHARE_SUFFIX:
                names.append(rest)
    return names


def vm_for_socket(base_url: str) -> str | None:
    """The name of the Docker host VM whose forwarded socket `base_url` is, if any."""
    for name in [DEFAULT_NAME, *vm_names()]:
        if f"unix://{vm_dir(name).path / 'docker.sock'}" == base_url:
            return name
    return None


def _script(name: str) -> str:
    return resources.files("labctl.engineside").joinpath(name).read_text()


def _vm_lab(memory_mib: int, cpus: int, name: str = DEFAULT_NAME, net_index: int = 0) -> Lab:
    """The VM as a one-node lab; a named VM's node has one data NIC (eth1) on the Docker
    hosts' network, numbered by its index there (tap tK-eth1, address .K)."""
    interfaces: tuple[Interface, ...] = ()
    index = 1
    if net_index:
        index = net_index
        interfaces = (Interface("eth1", 0, hostnet.mac(net_index), hostnet.cidr(net_index),
                                hostnet.MTU),)
    node = Node(VM_NODE, index, "none", memory_mib, cpus, IMAGE, interfaces,
                mounts=(Mount(str(share_dir()), VM_SHARE),))
    return Lab(vm_lab_name(name), "qemu", "", (node,), ())


# The VM's TCG translation cache. A lab node's 32 MiB (labctl.vm.machine) thrashes here:
# dockerd, containerd, its shims and runc are large Go programs, and every `docker exec`
# runs several of them. Measured on a two-node docker lab (docs/performance.md): at 32 MiB
# `up` took 34.8 s, `status` 12 s and a pingpong run 13 s; at 128 MiB 18.6, 4.8 and 7.2 s;
# at 256 MiB 14.7, 4.0 and 6.0 s; at 512 MiB no faster (15.7, 5.2, 5.1 s). The cache is
# the qemu process's memory, as far as it fills: the VM's RSS was 613 MiB at 32, 885 at
# 256 and 1184 at 512.
VM_TB_SIZE_MIB = 256


def vm_argv(lab: Lab, machine: QemuMachine, image: Image, accel: str, port: int,
            disk: Path) -> list[str]:
    """A qemu node's argv, plus the engine's data disk (vdb) and a larger translation
    cache."""
    return node_argv(lab, lab.nodes[0], machine, image, accel, port,
                     extra_drives=(f"file={disk},if=virtio,format=raw,cache=writeback",),
                     tb_size_mib=VM_TB_SIZE_MIB)


class DockerHostVM:
    def __init__(self, name: str = DEFAULT_NAME) -> None:
        self.name = check_vm_name(name)
        self.labdir = vm_dir(name)
        self.machine = node_machine(vm_lab_name(name), VM_NODE, self.labdir.node_dir(VM_NODE))

    @property
    def named(self) -> bool:
        return self.name != DEFAULT_NAME

    @property
    def title(self) -> str:
        return "the Docker host VM" + (f" {self.name}" if self.named else "")

    @property
    def host_address(self) -> str:
        """Its address on the Docker hosts' network ("" for the default VM)."""
        index = hostnet.recorded_index(self.labdir.path)
        return hostnet.address(index) if index else ""

    # --- paths and state -----------------------------------------------------------------
    @property
    def socket(self) -> Path:
        return self.labdir.path / "docker.sock"

    @property
    def base_url(self) -> str:
        return f"unix://{self.socket}"

    def _state(self) -> LabState | None:
        if not self.labdir.state_file.exists():
            return None
        try:
            return self.labdir.load_state()
        except CorruptStateError:
            return None  # the pidfile still names its qemu (down stops it)

    def _pid(self) -> int:
        state = self._state()
        node = state.nodes.get(VM_NODE) if state else None
        return node.pid if node and node.pid else self.machine.pidfile_pid()

    def running(self) -> bool:
        return self.machine.owns(self._pid())

    def shares_host_folders(self) -> bool:
        """Whether the running VM was started with the host-folder share (a VM started by
        an older labctl was not)."""
        state = self._state()
        node = state.nodes.get(VM_NODE) if state else None
        return bool(node and any(str(share_dir()) in arg for arg in node.argv))

    def engine_answers(self) -> bool:
        if not self.socket.exists():
            return False
        try:
            client = sdk().DockerClient(base_url=self.base_url, timeout=10)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except Exception:  # any failure means "not answering"
            return False

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Blocking lock: two labs started at once share one VM start."""
        with blocking_lock(lock_file(self.name)):
            yield

    # --- ssh into the VM -----------------------------------------------------------------
    def ssh_argv(self, command: list[str]) -> list[str]:
        return ssh.ssh_argv(self.labdir.ssh_config, VM_NODE, command)

    def run(self, command: list[str], *, input: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        # Bounded like a node's reply; past `timeout` exit 124, not an exception.
        try:
            return hostproc.run(self.ssh_argv(command), input=input, timeout=timeout,
                                check=False)
        except hostproc.HostProcessError as exc:
            if not exc.timed_out:
                raise
            return exc.result

    # --- up ------------------------------------------------------------------------------
    def up(self, progress: Progress, *, memory_mib: int = DEFAULT_MEMORY_MIB,
           cpus: int = DEFAULT_CPUS, accel: str = "auto", mirror: str | None = None,
           timeout: float = 600) -> dict[str, Any]:
        """Start the VM and its engine unless they run; return timings of what was done."""
        if os.geteuid() != 0:
            raise LabctlError(f"{self.title} needs root", hint="run labctl as root")
        timings: dict[str, Any] = {}
        with self._locked():
            if self.running():
                if self.engine_answers():
                    return {"already_running": True}
                progress("VM running, engine socket not answering: reconnecting")
                self._start_engine(progress, time.monotonic() + timeout, timings)
                return timings
            if self.labdir.path.exists():
                self._remove()  # a VM that died: clear what it left
            started = time.monotonic()
            progress(f"image {IMAGE}: checking cache")
            image = build_image(recipe(IMAGE), mirror,
                                progress=lambda m: progress(f"image {IMAGE}: {m}"))
            timings["image_seconds"] = round(time.monotonic() - started, 1)
            state = self._launch(image, memory_mib, cpus, accel, progress)
            boot = time.monotonic()
            machines = {VM_NODE: self.machine}
            wait_machines_ready(machines, state, self.labdir.ssh_config, timeout, progress,
                                what=self.title)
            state.phase = Phase.UP
            self.labdir.save_state(state)
            timings["boot_seconds"] = round(time.monotonic() - boot, 1)
            self._start_engine(progress, time.monotonic() + timeout, timings)
        return timings

    def _launch(self, image: Image, memory_mib: int, cpus: int, accel: str,
                progress: Progress) -> LabState:
        chosen = choose_accel(accel, image.kernel)
        cpus = cpus or (2 if chosen == "kvm" else 1)
        self.labdir.path.mkdir(parents=True, exist_ok=True, mode=0o750)
        share_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
        taps: list[TapState] = []
        net_index = 0
        if self.named:
            net_index = hostnet.attach(self.labdir.path)
            taps = [TapState(hostnet.tap(net_index), hostnet.BRIDGE, hostnet.MTU)]
        lab = _vm_lab(memory_mib, cpus, self.name, net_index)
        node = lab.nodes[0]
        disk = data_disk(image, self.name)
        if not disk.exists():
            progress(f"engine data disk {disk} ({DATA_DISK_SIZE}, sparse)")
            disk.parent.mkdir(parents=True, exist_ok=True)
            hostproc.run(["mkfs.ext4", "-q", "-F", "-L", "labctl-docker", str(disk),
                          DATA_DISK_SIZE], timeout=MKFS_SECONDS,
                         what=f"mkfs.ext4 (the engine's data disk {disk})",
                         missing_hint="apt-get install e2fsprogs")
        public_key = ssh.make_key(self.labdir.ssh_key)
        port = free_port()
        host_key = self.machine.make_host_key()
        ssh.write_known_hosts(self.labdir.known_hosts, {VM_NODE: host_key})
        ssh.write_config(self.labdir.ssh_config, self.labdir.ssh_key, {VM_NODE: port},
                         self.labdir.known_hosts)
        self.machine.make_disk(image.rootfs)
        self.machine.make_initrd(image.initrd, machine_payload(
            node_env(lab, node) | mounts_env(node), public_key,
            self.machine.host_key.read_bytes()))
        argv = vm_argv(lab, self.machine, image, chosen, port, disk)
        state = LabState(
            provider="qemu", accel=chosen, phase=Phase.CREATING,
            vm=VmInfo(memory_mib=memory_mib, cpus=cpus, image=image.path.name,
                      data_disk=str(disk), kernel=str(image.manifest.get("kernel", "?"))),
            nodes={VM_NODE: NodeState(ssh_port=port, argv=argv)},
        )
        self.labdir.save_state(state)
        progress(f"starting {self.title} ({chosen}, {memory_mib} MiB, {cpus} CPUs)")
        state.nodes[VM_NODE].pid = self.machine.launch(
            argv, taps, hostnet.NETNS if taps else "", VM_NODE)
        state.nodes[VM_NODE].started = time.time()
        self.labdir.save_state(state)
        return state

    def _start_engine(self, progress: Progress, deadline: float,
                      timings: dict[str, Any]) -> None:
        started = time.monotonic()
        progress(f"starting dockerd in {self.title}")
        result = self.run(["sh", "-s"], input=_script("docker-host-init.sh"),
                          timeout=max(30.0, deadline - time.monotonic()))
        hint = (f"`labctl docker-host status`; the engine log is /var/log/dockerd.log in the "
                f"VM (`labctl docker-host exec{self._name_option} -- tail "
                "/var/log/dockerd.log`)")
        try:  # the VM runs others' containers: its answer is read as a node's
            read_reply(result, sender=self.title, doing="start the Docker engine in",
                       hint=hint)
        except LabctlError as exc:
            log = hostproc.tail(result.stderr)
            raise LabctlError(exc.message + (f"\n{log}" if log else ""), hint=hint) from None
        timings["engine_seconds"] = round(time.monotonic() - started, 1)
        self._forward_socket()
        while not self.engine_answers():
            if time.monotonic() > deadline:
                raise LabctlError(f"the engine socket {self.socket} does not answer",
                                  hint=f"`labctl docker-host down{self._name_option}` and "
                                  "`up` again")
            time.sleep(0.2)
        self._prune_orphans(progress)

    @property
    def _name_option(self) -> str:
        return f" --name {self.name}" if self.named else ""

    def _forward_socket(self) -> None:
        """Ask the VM's ssh master to forward the engine's unix socket to ours (0600)."""
        self.socket.unlink(missing_ok=True)
        old_umask = os.umask(0o177)
        try:
            hostproc.run(["ssh", "-F", str(self.labdir.ssh_config), "-O", "forward", "-L",
                          f"{self.socket}:{REMOTE_SOCKET}", VM_NODE], timeout=30,
                         what="forwarding the engine socket (ssh -O forward)",
                         hint="`labctl docker-host down` and `up` again")
        finally:
            os.umask(old_umask)

    def _prune_orphans(self, progress: Progress) -> None:
        """Containers of labs whose lab directory is gone (e.g. VM stopped under a lab)."""
        client = sdk().DockerClient(base_url=self.base_url, timeout=60)
        try:
            for container in client.containers.list(all=True, filters={"label": "labctl.lab"}):
                lab = container.labels.get("labctl.lab", "")
                if lab and not LabDir(lab).path.exists():
                    progress(f"removing container {container.name} of lab {lab} (gone)")
                    container.remove(force=True)
        finally:
            client.close()

    # --- down, status --------------------------------------------------------------------
    def down(self) -> list[str]:
        with self._locked():
            if not self.labdir.path.exists():
                return []
            if self.running():
                # Stop the engine and flush its disk before the VM goes.
                self.run(["sh", "-c", "kill $(cat /run/docker.pid) 2>/dev/null; "
                          "i=0; while [ -e /run/docker.pid ] && [ $i -lt 100 ]; do "
                          "sleep 0.1; i=$((i+1)); done; sync; umount /var/lib/docker"],
                         timeout=60)
            return self._remove()

    def _remove(self) -> list[str]:
        """Stop the VM's qemu (waiting until it exited) and remove its directory."""
        removed: list[str] = []
        if self.labdir.ssh_config.exists():
            ssh.close_masters(self.labdir.ssh_config, [VM_NODE])
        state = self._state()
        recorded = state.nodes.get(VM_NODE) if state else None
        for pid in sorted({recorded.pid if recorded else 0, self.machine.pidfile_pid()} - {0}):
            if self.machine.stop(pid):
                removed.append(f"qemu {VM_NODE} (pid {pid})")
        self.socket.unlink(missing_ok=True)
        if self.labdir.remove():
            removed.append(f"directory {self.labdir.path}")
        if self.named:
            removed += hostnet.release()
        return removed

    def status(self) -> dict[str, Any]:
        state = self._state()
        info: dict[str, Any] = {"name": self.name, "directory": str(self.labdir.path),
                                "running": False}
        if state is None:
            info["state"] = "absent" if not self.labdir.path.exists() else "unreadable"
            return info
        node = state.nodes.get(VM_NODE, NodeState())
        running = self.running()
        info.update({
            "running": running,
            "state": "running" if running else "stopped",
            "pid": node.pid,
            "ssh": f"127.0.0.1:{node.ssh_port}",
            "accel": state.accel,
            **(vars(state.vm) if state.vm else {}),
            "socket": str(self.socket),
            **({"host_address": self.host_address} if self.named else {}),
            "engine": "answering" if running and self.engine_answers() else "not answering",
        })
        if running and info["engine"] == "answering":
            client = sdk().DockerClient(base_url=self.base_url, timeout=30)
            try:
                version = client.version()
                info["engine_version"] = version.get("Version")
                info["containers"] = len(client.containers.list(all=True))
                info["images"] = [t for i in client.images.list() for t in i.tags]
            finally:
                client.close()
            mem = self.run(["free", "-m"], timeout=30).stdout.splitlines()
            if len(mem) > 1:
                total, used = mem[1].split()[1:3]
                info["memory_used_mib"] = f"{used} of {total}"
        return info
