"""The qemu provider: one VM per node, each with its own kernel.

Nodes boot the cached image's kernel with a per-node initrd (stage 1 plus a payload of
this node's settings and our node-side code) and a qcow2 overlay on the shared root
image. Data NICs are taps in the lab's network namespace, handed to qemu as file
descriptors so that qemu itself stays in the host namespace, where its management port
forward listens on 127.0.0.1 only (user-mode networking with restrict=on).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labctl.errors import LabctlError
from labctl.faults import fault_point
from labctl.images.builder import Image, build_image
from labctl.images.cpio import CpioWriter
from labctl.images.recipes import recipe
from labctl.lab import ssh
from labctl.net import labnet
from labctl.providers.accel import choose_accel
from labctl.providers.base import (
    FAIL,
    READY,
    NodeRuntime,
    Progress,
    Provider,
    runtime_from_boot_log,
)
from labctl.providers.qmp import qmp_command
from labctl.topology.resolved import Lab, Node

STAGE = "labctl: stage "
# Node-side code shipped in every node's payload (stdlib + pyverbs only).
NODE_PACKAGES = ("nodeside", "verbs")
TB_SIZE_MIB = 64  # TCG translation cache: qemu's default (1 GiB) dominates a node's RSS


@dataclass
class TapPlan:
    name: str
    bridge: str
    mtu: int
    netdev: str  # qemu netdev id, the interface name in the node


@dataclass
class NodePlan:
    node: str
    argv: list[str]  # "{fd:TAP}" stands for the tap's file descriptor
    taps: list[TapPlan] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class LabPlan:
    netns: str
    bridges: list[tuple[str, int]]  # name, mtu
    nodes: list[NodePlan]


def rdma_device_name(node: Node) -> str:
    return f"{node.rdma}0"


def mgmt_mac(lab: str, node: Node) -> str:
    digest = hashlib.sha256(lab.encode()).digest()
    return f"02:{digest[0]:02x}:{digest[1]:02x}:{digest[2]:02x}:{node.index:02x}:00"


def node_env(lab: Lab, node: Node) -> dict[str, str]:
    iface = node.rdma_interface
    return {
        "LABCTL_LAB": lab.name,
        "LABCTL_NODE": node.name,
        "LABCTL_RDMA": node.rdma,
        "LABCTL_RDMA_DEV": rdma_device_name(node) if iface else "",
        "LABCTL_RDMA_NETDEV": iface.name if iface else "",
        "LABCTL_MGMT_MAC": mgmt_mac(lab.name, node),
        "LABCTL_IFACES": " ".join(f"{i.name},{i.mac},{i.ipv4},{i.mtu}" for i in node.interfaces),
    }


def plan_lab(
    lab: Lab,
    node_dirs: dict[str, Path],
    images: dict[str, Image],
    accel: str,
    ports: dict[str, int],
) -> LabPlan:
    """Everything `create` will make, as data (golden-tested)."""
    bridges = [(labnet.bridge_name(s.index), s.mtu) for s in lab.segments]
    plans = []
    for node in lab.nodes:
        d = node_dirs[node.name]
        image = images[node.image]
        accel_args = (
            ["-accel", "kvm", "-cpu", "host"]
            if accel == "kvm"
            else ["-accel", f"tcg,tb-size={TB_SIZE_MIB}"]
        )
        argv = [
            "qemu-system-x86_64",
            "-name",
            f"guest=labctl-{lab.name}-{node.name}",
            "-machine",
            "pc",
            *accel_args,
            "-m",
            str(node.memory_mib),
            "-smp",
            str(node.cpus),
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
            "-kernel",
            str(image.kernel),
            "-initrd",
            str(d / "initrd"),
            "-append",
            f"console=ttyS0 quiet loglevel=3 panic=-1 labctl.node={node.name}",
            "-drive",
            f"file={d / 'disk.qcow2'},if=virtio,format=qcow2,cache=unsafe",
            "-netdev",
            f"user,id=mgmt,restrict=on,hostfwd=tcp:127.0.0.1:{ports[node.name]}-:22",
            "-device",
            f"virtio-net-pci,netdev=mgmt,mac={mgmt_mac(lab.name, node)}",
            # host entropy: the node's CRNG is ready at once (sshd would wait for it)
            "-device",
            "virtio-rng-pci",
        ]
        taps = []
        for iface in node.interfaces:
            tap = TapPlan(
                labnet.tap_name(node.index, iface.name),
                labnet.bridge_name(iface.segment),
                iface.mtu,
                iface.name,
            )
            taps.append(tap)
            argv += [
                "-netdev",
                f"tap,id={iface.name},fd={{fd:{tap.name}}}",
                "-device",
                f"virtio-net-pci,netdev={iface.name},mac={iface.mac}",
            ]
        argv += [
            "-serial",
            f"file:{d / 'console.log'}",
            "-qmp",
            f"unix:{d / 'qmp.sock'},server=on,wait=off",
            "-pidfile",
            str(d / "qemu.pid"),
        ]
        plans.append(NodePlan(node.name, argv, taps, node_env(lab, node)))
    return LabPlan(labnet.netns_name(lab.name), bridges, plans)


def ready_facts(console: str) -> dict[str, Any]:
    """What a node's ready line says: "labctl: ready dev=rxe0 gid=1 mtu=1024 state=ACTIVE"."""
    line = console[console.index(READY) :].splitlines()[0].split(" [t=")[0]
    facts: dict[str, Any] = {}
    for word in line.removeprefix(READY).split():
        key, _, value = word.partition("=")
        if key == "gid":
            facts["gid_index"] = int(value)
        elif key == "mtu":
            facts["active_mtu"] = value
        elif key == "state":
            facts["port_state"] = value
    return facts


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _payload(env: dict[str, str], authorized_key: str) -> bytes:
    import labctl

    package = Path(labctl.__file__).parent
    archive = CpioWriter()
    archive.file("payload/opt/labctl/labctl/__init__.py", (package / "__init__.py").read_bytes())
    for sub in NODE_PACKAGES:
        if (package / sub).is_dir():
            archive.tree(package / sub, f"payload/opt/labctl/labctl/{sub}", skip=["__pycache__"])
    lines = "".join(f"{k}='{v}'\n" for k, v in env.items())
    archive.file("payload/etc/labctl/node.env", lines.encode())
    archive.file("payload/etc/labctl/authorized_keys", (authorized_key + "\n").encode(), 0o600)
    return archive.render()


def _pid_alive(pid: int, marker: str) -> bool:
    """True if `pid` runs and is the qemu of this node (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return marker.encode() in cmdline


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])
    except OSError:
        return "(no output)"


class QemuProvider(Provider):
    name = "qemu"

    def __init__(self, lab: Lab, labdir: Any) -> None:
        super().__init__(lab, labdir)
        self.accel_request = str(lab.provider_options.get("accel", "auto"))
        self.mirror: str | None = lab.provider_options.get("mirror")

    # --- host checks ---------------------------------------------------------------------
    def check_host(self) -> None:
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

    @staticmethod
    def _prefixed(progress: Progress, prefix: str) -> Progress:
        return lambda message: progress(prefix + message)

    def _marker(self, node: str) -> str:
        return f"guest=labctl-{self.lab.name}-{node}"

    # --- create --------------------------------------------------------------------------
    def create(self, progress: Progress) -> None:
        images = {}
        for name in sorted({n.image for n in self.lab.nodes}):
            progress(f"image {name}: checking cache")
            images[name] = build_image(
                recipe(name), self.mirror, progress=self._prefixed(progress, f"image {name}: ")
            )
        fault_point("image")
        first = images[self.lab.nodes[0].image]
        accel = choose_accel(self.accel_request, first.kernel)
        state: dict[str, Any] = {
            "provider": self.name,
            "accel": accel,
            "phase": "creating",
            "netns": labnet.netns_name(self.lab.name),
            "nodes": {},
        }
        self.labdir.save_state(state)  # before anything exists: `down` knows what to look for
        fault_point("state")
        public_key = ssh.make_key(self.labdir.ssh_key)
        ports = {n.name: _free_port() for n in self.lab.nodes}
        node_dirs = {n.name: self.labdir.node_dir(n.name) for n in self.lab.nodes}
        ssh.write_config(self.labdir.ssh_config, self.labdir.ssh_key, ports)
        lab_plan = plan_lab(self.lab, node_dirs, images, accel, ports)
        plans = {p.node: p for p in lab_plan.nodes}

        progress(f"network namespace {lab_plan.netns}")
        labnet.create_netns(lab_plan.netns)
        fault_point("netns")
        for bridge, mtu in lab_plan.bridges:
            labnet.add_bridge(lab_plan.netns, bridge, mtu)
        fault_point("bridges")

        for node in self.lab.nodes:
            plan = plans[node.name]
            d = node_dirs[node.name]
            d.mkdir(parents=True, exist_ok=True)
            image = images[node.image]
            subprocess.run(
                ["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(image.rootfs),
                 "-F", "raw", str(d / "disk.qcow2")],
                check=True, stdin=subprocess.DEVNULL,
            )
            fault_point("disk", node.name)
            (d / "initrd").write_bytes(image.initrd.read_bytes() + _payload(plan.env, public_key))
            state["nodes"][node.name] = {
                "ssh_port": ports[node.name],
                "rdma_dev": rdma_device_name(node) if node.rdma_interface else "",
                # what a repair needs to start the node again exactly as before
                "argv": plan.argv,
                "taps": [[t.name, t.bridge, t.mtu] for t in plan.taps],
            }
            progress(f"{node.name}: starting qemu ({accel})")
            self._launch(node.name, state)

    def _launch(self, node: str, state: dict[str, Any]) -> None:
        """Start (or restart) a node's qemu with fresh taps; record its pid at once."""
        info = state["nodes"][node]
        d = self.labdir.node_dir(node)
        console = d / "console.log"
        if console.exists() and console.stat().st_size:
            console.replace(d / "console.log.1")  # keep the previous boot for diagnosis
        console.write_bytes(b"")
        fds = {name: labnet.open_tap(state["netns"], name, bridge, mtu)
               for name, bridge, mtu in info["taps"]}
        argv = list(info["argv"])
        for tap, fd in fds.items():
            argv = [a.replace(f"{{fd:{tap}}}", str(fd)) for a in argv]
        try:
            with (d / "qemu.log").open("wb") as log:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True,
                                        pass_fds=tuple(fds.values()))
        finally:
            for fd in fds.values():
                os.close(fd)
        fault_point("qemu-started", node)
        # Popen can return before the kernel shows qemu's argv in /proc: wait for it, or
        # the first liveness check would take a starting node for a dead one.
        for _ in range(100):
            if proc.poll() is not None or _pid_alive(proc.pid, self._marker(node)):
                break
            time.sleep(0.01)
        info.update({"pid": proc.pid, "started": time.time()})
        for stale in ("gid_index", "active_mtu", "port_state"):
            info.pop(stale, None)
        self.labdir.save_state(state)
        fault_point("launched", node)

    def set_link_state(self, node: str, ifname: str, up: bool) -> None:
        # qemu drops the carrier on the node's NIC (the node sees link down) and stops
        # forwarding its frames; the netdev id is the interface name (see plan_lab).
        qmp_command(self.labdir.node_dir(node) / "qmp.sock", "set_link", name=ifname, up=up)

    def repair(self, nodes: list[str], progress: Progress) -> None:
        """Start again the nodes whose qemu is gone, on their existing disks."""
        state = self.labdir.load_state()
        for node in nodes:
            progress(f"{node}: restarting qemu")
            self._stop_qemu(state["nodes"][node].get("pid", 0), self._marker(node))
            (self.labdir.path / f"cm-{node}").unlink(missing_ok=True)
            self._launch(node, state)
        state["phase"] = "repairing"
        self.labdir.save_state(state)

    # --- readiness -----------------------------------------------------------------------
    def _console(self, node: str) -> str:
        try:
            return (self.labdir.node_dir(node) / "console.log").read_text(errors="replace")
        except OSError:
            return ""

    def _failure(self, node: str, reason: str) -> LabctlError:
        d = self.labdir.node_dir(node)
        return LabctlError(
            f"node {node}: {reason}\n--- console tail ({d / 'console.log'}) ---\n"
            f"{_tail(d / 'console.log')}--- qemu output ---\n{_tail(d / 'qemu.log', 10)}",
            hint="fix the cause, then `labctl down` removes what was made",
        )

    def wait_ready(self, timeout: float, progress: Progress) -> None:
        state = self.labdir.load_state()
        deadline = time.monotonic() + timeout
        pending = set(state["nodes"])
        started = time.monotonic()
        while pending:
            stages = {}
            for node in sorted(pending):
                console = self._console(node)
                pid = state["nodes"][node].get("pid", 0)
                if READY in console:
                    pending.discard(node)
                    state["nodes"][node].update(ready_facts(console))
                    continue
                if FAIL in console:
                    line = console[console.index(FAIL) :].splitlines()[0]
                    raise self._failure(node, line.removeprefix(FAIL).strip())
                if not _pid_alive(pid, self._marker(node)):
                    log = _tail(self.labdir.node_dir(node) / "qemu.log")
                    reason = "qemu exited"
                    if "host forwarding" in log:
                        reason = (
                            f"management port 127.0.0.1:{state['nodes'][node]['ssh_port']}"
                            " is in use"
                        )
                    raise self._failure(node, reason)
                found = [ln for ln in console.splitlines() if ln.startswith(STAGE)]
                stages[node] = found[-1].removeprefix(STAGE).split(" [")[0] if found else "boot"
            if not pending:
                break
            if time.monotonic() > deadline:
                slow = sorted(pending)[0]
                raise self._failure(
                    slow, f"not ready after {timeout:.0f} s (last stage: {stages.get(slow)})"
                )
            progress(
                f"booting ({time.monotonic() - started:.0f} s): "
                + ", ".join(f"{n} {s}" for n, s in stages.items())
            )
            time.sleep(0.2)
        fault_point("booted")
        progress("opening management connections")
        with ThreadPoolExecutor(max_workers=len(state["nodes"]) or 1) as pool:
            list(pool.map(lambda node: self._start_master(node, deadline), state["nodes"]))
        state["phase"] = "up"
        state["ready_seconds"] = round(time.monotonic() - started, 1)
        self.labdir.save_state(state)

    def _start_master(self, node: str, deadline: float) -> None:
        """A persistent ssh connection per node makes every later exec cheap."""
        check = subprocess.run(["ssh", "-F", str(self.labdir.ssh_config), "-O", "check", node],
                               stdin=subprocess.DEVNULL, capture_output=True, check=False)
        if check.returncode == 0:
            return  # its master survived (a repair restarts only the nodes that died)
        argv = [
            "ssh",
            "-F",
            str(self.labdir.ssh_config),
            "-o",
            "ControlMaster=yes",
            "-o",
            "ControlPersist=yes",
            "-N",
            "-f",
            node,
        ]
        while True:
            result = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
                check=False,
            )
            if result.returncode == 0:
                fault_point("master", node)
                return
            if time.monotonic() > deadline:
                raise self._failure(node, f"ssh does not answer: {result.stderr.strip()}")
            time.sleep(0.5)

    # --- status, exec, destroy -----------------------------------------------------------
    def nodes(self) -> list[NodeRuntime]:
        state = self.labdir.load_state()
        result = []
        for node in self.lab.nodes:
            info = state.get("nodes", {}).get(node.name)
            if info is None:
                pid = self._pidfile(node.name)
                if _pid_alive(pid, self._marker(node.name)):
                    result.append(NodeRuntime(node.name, "unrecorded", f"qemu process {pid} runs"
                                              " but up stopped before recording it"))
                else:
                    result.append(NodeRuntime(node.name, "absent", "never started"))
                continue
            details = {
                "pid": str(info.get("pid", 0)),
                "ssh": f"127.0.0.1:{info['ssh_port']}",
                "accel": state.get("accel", "?"),
            }
            if _pid_alive(info.get("pid", 0), self._marker(node.name)):
                result.append(
                    runtime_from_boot_log(node.name, self._console(node.name), details)
                )
            else:
                log = _tail(self.labdir.node_dir(node.name) / "qemu.log", 3).strip()
                why = f"qemu process {info['pid']} is gone" + (f": {log}" if log else "")
                result.append(NodeRuntime(node.name, "stopped", why, details))
        return result

    def exec_argv(self, node: str, command: list[str], *, tty: bool = False) -> list[str]:
        return ssh.ssh_argv(self.labdir.ssh_config, node, command, tty=tty)

    def destroy(self) -> list[str]:
        state = self.labdir.load_state()
        removed: list[str] = []
        nodes = state.get("nodes", {})
        if self.labdir.ssh_config.exists():
            ssh.close_masters(self.labdir.ssh_config, list(nodes))
        # A node's own pidfile also names its qemu: up may have died before recording it.
        for name in sorted(set(nodes) | self._node_dirs()):
            for pid in sorted({nodes.get(name, {}).get("pid", 0), self._pidfile(name)} - {0}):
                if self._stop_qemu(pid, self._marker(name)):
                    removed.append(f"qemu {name} (pid {pid})")
        ns = state.get("netns") or labnet.netns_name(self.lab.name)
        if labnet.delete_netns(ns):
            removed.append(f"netns {ns}")
        return removed

    def _node_dirs(self) -> set[str]:
        nodes = self.labdir.path / "nodes"
        return {p.name for p in nodes.iterdir() if p.is_dir()} if nodes.is_dir() else set()

    def _pidfile(self, node: str) -> int:
        """The pid qemu wrote to the node's -pidfile (0 if none)."""
        try:
            return int((self.labdir.node_dir(node) / "qemu.pid").read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    def _stop_qemu(self, pid: int, marker: str) -> bool:
        if not _pid_alive(pid, marker):
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            if not _pid_alive(pid, marker):
                break
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.05)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # Reap it if it is our child (an in-process `up`): no zombie left. Other pids: ECHILD.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        return True
