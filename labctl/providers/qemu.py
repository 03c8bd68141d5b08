"""The qemu provider: one VM per node (a QemuMachine each), each with its own kernel.

Nodes boot the cached image's kernel with a per-node initrd (stage 1 plus a payload of
this node's settings, our node-side code and its ssh host key) and a qcow2 overlay on the
shared root image. Data NICs are taps in the lab's network namespace, handed to qemu as
file descriptors so that qemu itself stays in the host namespace, where its management
port forward listens on 127.0.0.1 only (user-mode networking with restrict=on).
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from labctl import safefs
from labctl.capabilities import QEMU
from labctl.data.recipes import image_label, node_recipe
from labctl.errors import LabctlError
from labctl.images.builder import Image, build_image, cached_image
from labctl.images.kernels import (
    PreparedKernel,
    check_kernels,
    fault_notes,
    find_kernel,
    prepare,
)
from labctl.net import labnet
from labctl.node import ssh
from labctl.node.env import node_env, rdma_device_name
from labctl.node.ready import NodeRuntime, runtime_from_boot_log
from labctl.progress import Progress
from labctl.providers.base import HostLink, Provider
from labctl.store.labdir import LabDir
from labctl.store.state import CorruptStateError, LabState, NodeState, NodeStatus, TapState
from labctl.store.state_recorder import StateRecorder
from labctl.testpoints import fault_point
from labctl.topology.resolved import Lab, Node
from labctl.vm.accel import choose_accel
from labctl.vm.machine import (
    START_HELPER,
    QemuMachine,
    Restore,
    check_qemu_host,
    free_port,
    kernel_env,
    machine_payload,
    mounts_env,
    node_argv,
    node_machine,
    start_detached,
    tail,
    wait_machines_ready,
)
from labctl.vm.restore import REFUSED, give_identities, restored_macs, restored_nodes
from labctl.vm.saved import (
    MachineShape,
    SavedMachine,
    discard,
    find_or_make,
    identity_message,
)


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


def plan_lab(
    lab: Lab,
    node_dirs: dict[str, Path],
    images: dict[str, Image],
    accel: str,
    ports: dict[str, int],
    restores: dict[str, Restore] | None = None,
    kernels: dict[str, PreparedKernel] | None = None,
) -> LabPlan:
    """Everything `create` will make, as data (golden-tested). `restores`: the nodes
    restored from a saved machine, each with its RAM and state files (the others boot
    cold); `kernels`: the own kernels nodes boot, by their path."""
    bridges = [(labnet.bridge_name(s.index), s.mtu) for s in lab.segments]
    plans = [plan_node(lab, node, node_dirs[node.name],
                       images[image_label(node.image, node.packages)], accel, ports[node.name],
                       (restores or {}).get(node.name),
                       (kernels or {}).get(node.kernel_path or ""))
             for node in lab.nodes]
    return LabPlan(labnet.netns_name(lab.name), bridges, plans)


def plan_node(lab: Lab, node: Node, node_dir: Path, image: Image, accel: str,
              port: int, restore: Restore | None = None,
              kernel: PreparedKernel | None = None) -> NodePlan:
    """One node's part of plan_lab: what `create` starts, and what a repair starts again
    (always cold: a repair boots the node's own disk)."""
    machine = node_machine(lab.name, node.name, node_dir)
    argv = node_argv(lab, node, machine, image, accel, port, restore=restore, kernel=kernel)
    taps = [TapPlan(labnet.tap_name(node.index, i.name), labnet.bridge_name(i.segment),
                    i.mtu, i.name) for i in node.interfaces]
    return NodePlan(node.name, argv, taps,
                    node_env(lab, node) | mounts_env(node) | kernel_env(kernel))


def note(line: str) -> None:
    """One line the user should see whatever the progress display (why a node boots cold)."""
    print(f"labctl: {line}", file=sys.stderr, flush=True)


def _prefixed(progress: Progress, prefix: str) -> Progress:
    return lambda message: progress(prefix + message)


class QemuProvider(Provider):
    name = "qemu"
    capabilities = QEMU

    def __init__(self, lab: Lab, labdir: LabDir) -> None:
        super().__init__(lab, labdir)
        self.accel_request = str(lab.provider_options.get("accel", "auto"))
        self.mirror: str | None = lab.provider_options.get("mirror")
        # The state version the lab's ssh_config was last checked against (one command's)
        self._ssh_config_checked: int | None = None
        self._ssh_config_lock = threading.Lock()  # exec_argv is called from one thread per node

    def machine(self, node: str) -> QemuMachine:
        return node_machine(self.lab.name, node, self.labdir.node_dir(node))

    # --- host checks ---------------------------------------------------------------------
    def check_host(self) -> None:
        check_qemu_host()

    # --- create --------------------------------------------------------------------------
    def create(self, record: StateRecorder, progress: Progress) -> None:
        images = {}
        for node in self.lab.nodes:
            name = image_label(node.image, node.packages)
            if name not in images:
                progress(f"image {name}: checking cache")
                images[name] = build_image(node_recipe(node.image, node.packages), self.mirror,
                                           progress=_prefixed(progress, f"image {name}: "))
        kernels = self._prepare_kernels(images, progress)
        fault_point("image")
        first = images[image_label(self.lab.nodes[0].image, self.lab.nodes[0].packages)]
        accel = choose_accel(self.accel_request, first.kernel)
        record.facts(accel=accel)
        fault_point("state")
        public_key = ssh.make_key(self.labdir.ssh_key)
        ports = {n.name: free_port() for n in self.lab.nodes}
        node_dirs = {n.name: self.labdir.node_dir(n.name) for n in self.lab.nodes}
        saved = (self._saved_machines(images, accel, kernels, progress)
                 if self.lab.provider_options.get("boot") == "restore" else {})
        lab_plan = plan_lab(self.lab, node_dirs, images, accel, ports,
                            {name: m.restore() for name, m in saved.items()}, kernels)
        plans = {p.node: p for p in lab_plan.nodes}
        machines = {n.name: self.machine(n.name) for n in self.lab.nodes}
        host_keys = {name: m.make_host_key() for name, m in machines.items()}
        ssh.write_known_hosts(self.labdir.known_hosts, host_keys)
        ssh.write_config(self.labdir.ssh_config, self.labdir.ssh_key, ports,
                         self.labdir.known_hosts)

        progress(f"network namespace {lab_plan.netns}")
        labnet.create_netns(lab_plan.netns, labnet.owner_mark(self.labdir.path))
        fault_point("netns")
        for bridge, mtu in lab_plan.bridges:
            labnet.add_bridge(lab_plan.netns, bridge, mtu)
        fault_point("bridges")

        for node in self.lab.nodes:
            plan, machine = plans[node.name], machines[node.name]
            image = images[image_label(node.image, node.packages)]
            if node.name in saved:  # the saved machine's disk, as its RAM knows it
                safefs.make_dirs(machine.dir, self.labdir.path)
                safefs.copy_file(saved[node.name].disk, machine.disk, self.labdir.path,
                                 0o600, saved[node.name].path.parent)
            else:
                machine.make_disk(image.rootfs)
            fault_point("disk", node.name)
            # a restored node's too: a repair boots it cold
            own = kernels.get(node.kernel_path or "")
            machine.make_initrd(image.initrd if own is None else own.initrd(image),
                                machine_payload(
                plan.env, public_key, machine.host_key.read_bytes()))
            info = NodeState(
                ssh_port=ports[node.name],
                rdma_dev=rdma_device_name(node) if node.rdma_interface else "",
                # what a repair needs to start the node again exactly as before
                argv=plan.argv,
                taps=[TapState(t.name, t.bridge, t.mtu) for t in plan.taps],
            )
            how = "restoring the saved machine" if node.name in saved else "booting"
            progress(f"{node.name}: starting qemu ({accel}, {how})")
            # state.json once for every node (below): until then `status` and `down` find
            # a started node by its qemu's pidfile (destroy_machines, nodes())
            self._launch(node.name, info, record, save=False)
        record.save()
        if saved:
            identities = {name: identity_message(
                plans[name].env, public_key, machines[name].host_key.read_bytes(),
                restored_macs(self.lab, self.lab.node(name))) for name in saved}
            states = {name: m.state for name, m in saved.items()}
            for name, why in give_identities(machines, record.state, states,
                                             identities).items():
                self._boot_cold(name, why, saved[name], images, record, progress)

    def _prepare_kernels(self, images: dict[str, Image],
                         progress: Progress) -> dict[str, PreparedKernel]:
        """The own kernels the nodes boot (by path), made ready for their images (cached
        per kernel: the first `up` on a kernel makes its modules disk). The lab service
        checked their configuration before anything was made (lifecycle.check_own_kernels):
        here they are only found, not read and checked a second time."""
        found = {n.kernel_path: find_kernel(Path(n.kernel_path))
                 for n in self.lab.nodes if n.kernel_path is not None}
        prepared: dict[str, PreparedKernel] = {}
        for node in self.lab.nodes:
            path = node.kernel_path
            if path is None:
                continue
            image = images[image_label(node.image, node.packages)]
            kernel = prepare(found[path], image, _prefixed(progress, f"{node.name}: "))
            if path not in prepared:
                for line in fault_notes(found[path]):
                    note(line)
            prepared[path] = kernel
        return prepared

    def _saved_machines(self, images: dict[str, Image], accel: str,
                        kernels: dict[str, PreparedKernel],
                        progress: Progress) -> dict[str, SavedMachine]:
        """The saved machine each node is restored from (one per image, kernel and shape);
        a node left out boots cold (one line says why)."""
        found: dict[str, SavedMachine] = {}
        by_shape: dict[tuple[str, str, MachineShape], SavedMachine | None] = {}
        for node in self.lab.nodes:
            if node.mounts:
                note(f"{node.name}: booting cold: its host folders are virtio-9p devices, "
                     "which a saved machine does not have")
                continue
            label = image_label(node.image, node.packages)
            shape = MachineShape.of(node, accel)
            kernel = kernels.get(node.kernel_path or "")
            which = (label, "" if kernel is None else kernel.path.name, shape)
            if which not in by_shape:
                by_shape[which] = find_or_make(
                    images[label], shape, _prefixed(progress, f"{node.name}: "), note, kernel)
            saved = by_shape[which]
            if saved is not None:
                found[node.name] = saved
        return found

    def _boot_cold(self, name: str, why: str, saved: SavedMachine, images: dict[str, Image],
                   record: StateRecorder, progress: Progress) -> None:
        """A node whose restore failed starts again, cold, on a fresh disk."""
        note(f"{name}: {why}: booting it cold")
        if why.startswith(REFUSED):
            discard(saved.path)  # made again at the next restore
        node = self.lab.node(name)
        info = record.state.nodes[name]
        machine = self.machine(name)
        machine.stop(info.pid)
        machine.make_disk(images[image_label(node.image, node.packages)].rootfs)
        plan = self._replan(name, record.state.accel, info.ssh_port)
        info.argv = plan.argv
        progress(f"{name}: starting qemu ({record.state.accel}, booting)")
        self._launch(name, info, record)

    def _launch(self, node: str, info: NodeState, record: StateRecorder, *,
                save: bool = True) -> None:
        """Start (or restart) a node's qemu with fresh taps; record its pid at once (saved
        at once too, unless the caller saves a batch of nodes)."""
        info.pid = self.machine(node).launch(info.argv, info.taps,
                                             labnet.netns_name(self.lab.name), node)
        info.started = time.time()
        info.clear_ready_facts()
        record.node(node, info, save=save)
        fault_point("launched", node)

    def host_link(self, state: LabState, node: str, ifname: str) -> HostLink:
        """The node's tap on the lab's bridge, in the lab's namespace on this host."""
        return HostLink(labnet.tap_name(self.lab.node(node).index, ifname), "tap",
                        labnet.netns_name(self.lab.name))

    def set_link_state(self, node: str, ifname: str, up: bool) -> None:
        # qemu drops the carrier on the node's NIC (the node sees link down) and stops
        # forwarding its frames; the netdev id is the interface name (see plan_lab).
        self.machine(node).qmp("set_link", name=ifname, up=up)

    def stop_node(self, node: str) -> None:
        """The node's qemu ends (SIGTERM: no shutdown in the guest, its taps vanish): its
        peers see what a crash shows them. Only the process this machine owns is signalled."""
        info = self.labdir.load_state().nodes.get(node)
        machine = self.machine(node)
        if info is None or not machine.owns(info.pid):
            raise LabctlError(f"lab {self.lab.name}: no qemu process of {node} runs",
                              hint=f"`labctl status --lab {self.lab.name}`")
        ssh.close_masters(self.labdir.ssh_config, [node])  # else ssh waits for its timeout
        machine.stop(info.pid)

    def repair(self, record: StateRecorder, nodes: list[str], progress: Progress) -> None:
        """Start again the nodes whose qemu is gone, on their existing disks."""
        state = record.state
        for node in nodes:
            progress(f"{node}: restarting qemu")
            machine = self.machine(node)
            info = state.nodes.get(node)
            if info is None:
                raise LabctlError(f"lab {self.lab.name}: {node} was never started",
                                  hint=f"`labctl down --lab {self.lab.name}`, then `labctl up`")
            machine.stop(info.pid)
            safefs.unlink(self.labdir.path / f"cm-{node}", self.labdir.path)
            # state.json's argv and taps are data, never run: both are planned again from
            # the lab, as `create` planned them
            plan = self._replan(node, state.accel, info.ssh_port)
            info.argv = plan.argv
            info.taps = [TapState(t.name, t.bridge, t.mtu) for t in plan.taps]
            self._launch(node, info, record)

    def _replan(self, name: str, accel: str, port: int) -> NodePlan:
        """`name`'s plan as `create` made it, from the lab and the cached image."""
        node = self.lab.node(name)
        image = cached_image(node_recipe(node.image, node.packages), self.mirror)
        if image is None:
            label = image_label(node.image, node.packages)
            raise LabctlError(
                f"lab {self.lab.name}: the image of {name} ({label}) is no longer cached",
                hint=f"`labctl down --lab {self.lab.name}`, then `labctl up` builds it again")
        if not 0 < port <= 65535:
            raise LabctlError(f"lab {self.lab.name}: no ssh port recorded for {name}",
                              hint=f"`labctl down --lab {self.lab.name}`, then `labctl up`")
        kernel = None
        if node.kernel_path is not None:
            files = check_kernels([node])[node.kernel_path]
            kernel = prepare(files, image, lambda _message: None)
        return plan_node(self.lab, node, self.labdir.node_dir(name), image,
                         "kvm" if accel == "kvm" else "tcg", port, kernel=kernel)

    # --- readiness -----------------------------------------------------------------------
    def wait_ready(self, state: LabState, timeout: float, progress: Progress,
                   nodes: list[str] | None = None) -> None:
        machines = {name: self.machine(name) for name in state.nodes
                    if nodes is None or name in nodes}
        self._refresh_ssh_config(state)
        wait_machines_ready(machines, state, self.labdir.ssh_config, timeout, progress)
        # A restored node's helper runs already (it was saved warm): starting another one
        # only to find it there costs the node half a second of Python right when the
        # user's first command comes. Through the node's master; never as a master of its
        # own (ControlMaster=no): a start that outlived `down`'s closing of the masters
        # must not persist as one.
        warm = set(restored_nodes(state))
        start_detached({
            self.machine(name).helper_log: ssh.ssh_argv(self.labdir.ssh_config, name,
                                                        START_HELPER,
                                                        options={"ControlMaster": "no"})
            for name, info in state.nodes.items()
            if info.rdma_dev and name in machines and name not in warm}, self.labdir.path)

    # --- status, exec, destroy -----------------------------------------------------------
    def nodes(self) -> list[NodeRuntime]:
        state = self.labdir.load_state()
        result = []
        for node in self.lab.nodes:
            machine = self.machine(node.name)
            info = state.nodes.get(node.name)
            if info is None:
                pid = machine.pidfile_pid()
                if machine.owns(pid):
                    result.append(NodeRuntime(node.name, NodeStatus.UNRECORDED,
                                              f"qemu process {pid} runs but up stopped before "
                                              "recording it"))
                else:
                    result.append(NodeRuntime(node.name, NodeStatus.ABSENT, "never started"))
                continue
            details = {"pid": str(info.pid), "ssh": f"127.0.0.1:{info.ssh_port}",
                       "accel": state.accel or "?"}
            if machine.owns(info.pid):
                result.append(runtime_from_boot_log(node.name, machine.console(), details))
            else:
                log = tail(machine.qemu_log, 3).strip()
                why = f"qemu process {info.pid} is gone" + (f": {log}" if log else "")
                result.append(NodeRuntime(node.name, NodeStatus.STOPPED, why, details))
        return result

    def exec_argv(self, node: str, command: list[str], *, tty: bool = False) -> list[str]:
        self._refresh_ssh_config()
        return ssh.ssh_argv(self.labdir.ssh_config, node, command, tty=tty)

    def console_log(self, node: str) -> Path:
        """The serial console qemu writes (labctl/vm/machine.py: its boot and kernel log)."""
        return self.labdir.node_dir(node) / "console.log"

    def _refresh_ssh_config(self, state: LabState | None = None) -> None:
        """The lab's ssh_config as labctl writes it, from state.json's checked ports (or
        those of `state`, the lifecycle's own at a step): once per state a command reads
        (LabDir.state_version), else at every use."""
        with self._ssh_config_lock:
            # the version before the read: a save in between makes it render again
            version = None if state is not None else self.labdir.state_version()
            if version is not None and version == self._ssh_config_checked:
                return
            if state is None:
                state = self.labdir.load_state()
            ports = {name: info.ssh_port for name, info in state.nodes.items() if info.ssh_port}
            ssh.refresh_config(self.labdir.ssh_config, self.labdir.ssh_key, ports,
                               self.labdir.known_hosts)
            self._ssh_config_checked = version

    def destroy(self) -> list[str]:
        try:
            state: LabState | None = self.labdir.load_state()
        except CorruptStateError:
            state = None  # the pidfiles and the lab's name still say what to stop
        return destroy_machines(self.labdir, self.lab.name, state)


def destroy_machines(labdir: LabDir, lab_name: str, state: LabState | None) -> list[str]:
    """Stop every qemu of the lab (recorded, or named by a node's own pidfile: up may have
    died before recording it), waiting until each has exited; delete the lab's netns."""
    removed: list[str] = []
    recorded = state.nodes if state else {}  # its keys are node names (read_state checks)
    names = set(recorded) | set(labdir.node_names_on_disk())
    if labdir.ssh_config.exists():
        ssh.close_masters(labdir.ssh_config, sorted(names))
    for name in sorted(names):
        machine = node_machine(lab_name, name, labdir.node_dir(name))
        info = recorded.get(name)
        for pid in sorted({info.pid if info else 0, machine.pidfile_pid()} - {0}):
            if machine.stop(pid):
                removed.append(f"qemu {name} (pid {pid})")
    if labdir.ssh_config.exists():
        # sessions the masters did not carry: up's detached helper starts (start_detached)
        for pid in ssh.end_clients(labdir.ssh_config):
            removed.append(f"ssh session (pid {pid})")
    ns = labnet.netns_name(lab_name)  # from the lab's name, never state.json's netns
    if labnet.delete_netns(ns, labnet.owner_mark(labdir.path)):
        removed.append(f"netns {ns}")
    return removed
