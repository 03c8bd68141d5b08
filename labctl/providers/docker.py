"""The docker provider: nodes are containers sharing one kernel with per-netns Soft-RoCE.

The engine is the Docker host VM (default; labctl/dockerhost) or a local engine whose
kernel passes `labctl doctor`. Nodes run the node image's root filesystem, imported into
the engine once (`docker import` of root.ext4's files plus docker/node-image.conf): the
same packages as VM nodes. Each container gets only what RDMA needs (see docs/docker.md):

  --network none           its data interfaces come from labctl, nothing else
  --cap-add NET_ADMIN      `rdma link add` and addresses inside its own netns
  --ulimit memlock=-1      memory registration pins pages (instead of CAP_IPC_LOCK)
  /dev/infiniband (bind)   uverbs nodes appear there as devices are created
  device cgroup rules      c 231:* (uverbs/umad/issm) and c 10:M (the RDMA CM misc device)

Links: one netns per lab in the engine's kernel (`labctl-LAB`) with a bridge per segment;
per node interface a veth whose bridge end stays there and whose other end is created
inside the container's netns (dockernet.py, run as root beside the engine). Each node
creates its own rxe inside its netns (node-init.sh container), named rxe_LAB_NODE since in
shared netns mode every namespace of the kernel sees every device. Containers carry labels
(labctl, labctl.lab, labctl.owner, labctl.node, labctl.rdma-dev): status and down find
them by label alone, the owner (a digest of the lab directory's path) keeping apart labs
of one name from two state directories on one engine, as the engine-side netns's mark
does. `link set` pulls a node's cable by taking its veth's bridge end down; a repair
starts a stopped container again and gives it new veths (its old netns died).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import weakref
from abc import abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import labctl.dockerhost.netns as netns
import labctl.providers.hostbinds as hostbinds
import labctl.providers.swarm as swarm
from labctl import hostproc
from labctl.capabilities import DOCKER
from labctl.data import data_path
from labctl.data.recipes import image_label, node_recipe
from labctl.dockerhost.engine import Engine, local_base_url, resolve_engine
from labctl.dockerhost.sdk import sdk
from labctl.dockerhost.vm import VM_SHARE, DockerHostVM, share_dir
from labctl.errors import LabctlError
from labctl.images.builder import Image, build_image
from labctl.net import labnet
from labctl.node.env import env_file, node_code_files, node_env
from labctl.node.ready import (
    FAIL,
    STAGE,
    NodeRuntime,
    ready_line,
    record_ready,
    runtime_from_boot_log,
)
from labctl.progress import Progress
from labctl.providers.base import HOST, VM, HostLink, Provider, UnsupportedError
from labctl.providers.labels import LABEL, lab_labels, lab_selector, owned_by
from labctl.store.labdir import LabDir
from labctl.store.state import CorruptStateError, LabState, NodeState, NodeStatus
from labctl.store.state_recorder import StateRecorder
from labctl.topology.resolved import Lab, Node
from labctl.vm.machine import check_qemu_host

IMAGE_REPOSITORY = "labctl-node"
INFINIBAND_MAJOR = 231  # umad 0-63, issm 64-127, uverbs 192-255: one major for all of them
STOP_WAIT_SECONDS = 30  # a killed container has exited long before this
BOOT_LOG_BYTES = 1 << 20  # of a container's log: its boot, a few KiB; the node may print more
# Not shipped into containers: modules (containers cannot load them) and the fs's own dir.
MOUNT_SECONDS = 60  # a loop mount or umount of the image: instant unless the host is stuck
IMPORT_EXCLUDES = ("./usr/lib/modules", "./lost+found", "./boot")


def docker_dir() -> Path:
    """labctl's copy of the checkout's docker/ directory (the node image's import recipe)."""
    return data_path("docker")


def import_changes() -> list[str]:
    """Dockerfile instructions applied by `docker import --change` (docker/node-image.conf)."""
    path = docker_dir() / "node-image.conf"
    try:
        text = path.read_text()
    except OSError:
        raise LabctlError(f"{path} is missing", hint="reinstall labctl") from None
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def image_tag(image: Image, changes: list[str]) -> str:
    digest = hashlib.sha256("\n".join(changes).encode()).hexdigest()[:8]
    return f"{IMAGE_REPOSITORY}:{image.path.name}-{digest}"


def rdma_device_name(lab: str, node: Node) -> str:
    return f"{node.rdma}_{lab}_{node.name}"


def container_name(lab: str, node: str) -> str:
    return f"labctl-{lab}-{node}"


def veth_name(node: Node, ifname: str) -> str:
    return f"v{node.index}-{ifname}"[:15]


def container_env(lab: Lab, node: Node) -> dict[str, str]:
    env = node_env(lab, node)
    env.pop("LABCTL_MGMT_MAC", None)  # no management NIC: docker exec is the channel
    env["LABCTL_RDMA_DEV"] = rdma_device_name(lab.name, node) if node.rdma_interface else ""
    return env


@dataclass
class ContainerPlan:
    node: str
    create: dict[str, Any]  # keyword arguments of client.containers.create


@dataclass
class DockerLabPlan:
    netns: str
    bridges: list[tuple[str, int]]
    veths: list[dict[str, Any]]  # host, bridge, node, name, mac, mtu (pid filled at create)
    containers: list[ContainerPlan] = field(default_factory=list)


def vm_share_point(lab: str, node: str, index: int) -> Path:
    """Where `up` bind-mounts a node's host folder for the Docker host VM (on this host)."""
    return share_dir() / lab / f"{node}-{index}"


def plan_lab(lab: Lab, tags: dict[str, str], rdma_cm: str, owner: str,
             vm_engine: bool = False) -> DockerLabPlan:
    """Everything `create` makes, as data (golden-tested). `tags`: image name -> engine tag;
    `rdma_cm`: "MAJOR:MINOR" of the RDMA CM device in the engine's kernel; `vm_engine`:
    the engine is the Docker host VM, whose path of a host folder is its bind mount
    under the VM's share."""
    rules = [f"c {INFINIBAND_MAJOR}:* rwm"]
    if rdma_cm:
        rules.append(f"c {rdma_cm} rwm")
    containers = []
    for node in lab.nodes:
        labels = lab_labels(lab.name, owner) | {
            f"{LABEL}.node": node.name,
            f"{LABEL}.rdma-dev": rdma_device_name(lab.name, node) if node.rdma_interface else "",
        }
        # Host folders as bind mounts, the Engine API's own records (one folder may go to
        # two places); with the VM, from the VM's share (bind mounts made at `up`).
        binds = {"mounts": [
            {"Type": "bind", "Target": m.target, "ReadOnly": m.readonly,
             "Source": f"{VM_SHARE}/{lab.name}/{node.name}-{i}" if vm_engine else m.source}
            for i, m in enumerate(node.mounts)]} if node.mounts else {}
        containers.append(ContainerPlan(node.name, binds | {
            "image": tags[image_label(node.image, node.packages)],
            "name": container_name(lab.name, node.name),
            "hostname": node.name,
            "network_mode": "none",
            "cap_add": ["NET_ADMIN"],
            "ulimits": [{"Name": "memlock", "Soft": -1, "Hard": -1}],
            "device_cgroup_rules": rules,
            "volumes": {"/dev/infiniband": {"bind": "/dev/infiniband", "mode": "rw"}},
            "environment": container_env(lab, node),
            "labels": labels,
            "mem_limit": f"{node.memory_mib}m",
            "detach": True,
            # A router forwards: set at creation (a container's /proc/sys is read-only).
            **({"sysctls": {"net.ipv4.ip_forward": "1"}} if node.router else {}),
        }))
    veths = [
        {"host": veth_name(node, iface.name), "bridge": labnet.bridge_name(iface.segment),
         "node": node.name, "name": iface.name, "mac": iface.mac, "mtu": iface.mtu}
        for node in lab.nodes for iface in node.interfaces
    ]
    return DockerLabPlan(labnet.netns_name(lab.name),
                         [(labnet.bridge_name(s.index), s.mtu) for s in lab.segments],
                         veths, containers)


def node_payload(env: dict[str, str]) -> bytes:
    """A tar of /opt/labctl (node-side code) and /etc/labctl/node.env for put_archive."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add_file(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))

        for rel, path in node_code_files():
            add_file(f"opt/labctl/{rel}", path.read_bytes(),
                     0o755 if path.suffix == ".sh" else 0o644)
        add_file("etc/labctl/node.env", env_file(env))
    return buf.getvalue()


def ensure_node_image(client: Any, image: Image, progress: Progress) -> str:
    """Import the node image's root filesystem into the engine unless it is there."""
    changes = import_changes()
    tag = image_tag(image, changes)
    try:
        client.images.get(tag)
        return tag
    except sdk().errors.ImageNotFound:
        pass
    progress(f"importing {image.rootfs.name} of {image.path.name} as {tag}")
    with tempfile.TemporaryDirectory(prefix="labctl-rootfs-") as mnt:
        hostproc.run(["mount", "-o", "loop,ro,noload", str(image.rootfs), mnt],
                     timeout=MOUNT_SECONDS, what=f"mounting {image.rootfs.name} (loop, read-only)",
                     hint="importing a node image mounts its root file system: run labctl "
                     "as root on a host with loop devices (`losetup -f` names a free one)")
        try:
            tar = subprocess.Popen(
                ["tar", "--numeric-owner", "--xattrs", "-C", mnt, "-cf", "-",
                 *(f"--exclude={e}" for e in IMPORT_EXCLUDES), "."],
                stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
            assert tar.stdout is not None
            repository, _, version = tag.partition(":")
            client.api.import_image_from_stream(tar.stdout, repository=repository,
                                                tag=version, changes=changes)
            if tar.wait() != 0:
                raise LabctlError(f"tar of {image.rootfs} failed (exit {tar.returncode})")
        finally:
            # its failure must not hide the import's; a mount left is seen by `mount`
            with contextlib.suppress(hostproc.HostProcessError):
                hostproc.run(["umount", mnt], timeout=MOUNT_SECONDS, check=False)
    client.images.get(tag)
    return tag


def container_facts(client: Any, tag: str) -> str:
    """"MAJOR:MINOR of rdma_cm, then the RDMA modules loaded", read in a throwaway
    container: sysfs shows the engine's kernel, so this works on any host, remote too."""
    script = ("cat /sys/class/misc/rdma_cm/dev 2>/dev/null; "
              "for m in rdma_rxe siw; do [ -d /sys/module/$m ] && echo $m; done; true")
    out = client.containers.run(tag, ["sh", "-c", script], network_mode="none", remove=True)
    words = out.decode(errors="replace").split()
    return " ".join("rxe" if w == "rdma_rxe" else w for w in words)


def _failure(node: str, reason: str, logs: str) -> LabctlError:
    tail = "".join(logs.splitlines(keepends=True)[-25:])
    return LabctlError(f"node {node}: {reason}\n--- container log tail ---\n{tail}",
                       hint="fix the cause, then `labctl down` removes what was made")


class ContainerProvider(Provider):
    """What the docker providers share: images, containers found by label, boot logs,
    readiness, exec. DockerProvider runs a lab in one engine (the Docker host VM or a
    local one); SwarmProvider (docker_swarm.py) spreads it over several hosts."""

    name = "docker"

    def __init__(self, lab: Lab, labdir: LabDir) -> None:
        super().__init__(lab, labdir)
        self.mirror: str | None = lab.provider_options.get("mirror")
        self.engine_option = str(lab.provider_options.get("engine")
                                 or os.environ.get("LABCTL_DOCKER_ENGINE", "vm"))

    # --- host checks ---------------------------------------------------------------------
    def check_host(self) -> None:
        if shutil.which("docker") is None:
            raise LabctlError("the docker client (docker CLI) is not installed: `labctl exec`"
                              " and the examples run through `docker exec`",
                              hint="apt-get install docker-cli (or docker.io)")
        if os.geteuid() != 0:
            raise LabctlError("the docker provider needs root (the Docker host VM, mounting "
                              "the node image)", hint="run labctl with sudo or as root")
        if self.engine_option == "vm":
            vm = DockerHostVM()
            if any(n.mounts for n in self.lab.nodes) and vm.running() and \
                    not vm.shares_host_folders():
                # Bind mounts name paths on the engine's machine: the VM sees this host's
                # folders only through the share it gets at boot.
                raise LabctlError(
                    "host folders (mounts): the running Docker host VM was started without "
                    "the host-folder share (by an older labctl)",
                    hint="restart it when no lab uses it: `labctl docker-host down`, then "
                    "`labctl up` again")
            check_qemu_host()
        else:
            self._check_engine()

    def _check_engine(self) -> None:
        """With an engine other than the Docker host VM: that it answers, if it can tell."""

    @staticmethod
    def _prefixed(progress: Progress, prefix: str) -> Progress:
        return lambda message: progress(prefix + message)

    # --- create --------------------------------------------------------------------------
    def _images(self, client: Any, progress: Progress, prefix: str = "") -> dict[str, str]:
        images: dict[str, str] = {}
        for node in self.lab.nodes:
            name = image_label(node.image, node.packages)
            if name in images:
                continue
            progress(f"{prefix}image {name}: checking cache")
            image = build_image(node_recipe(node.image, node.packages), self.mirror,
                                progress=self._prefixed(progress, f"{prefix}image {name}: "))
            images[name] = ensure_node_image(client, image,
                                             self._prefixed(progress, prefix))
        return images

    @staticmethod
    def _record_and_load(record: StateRecorder, node: str, kwargs: dict[str, Any],
                         container: Any) -> None:
        """A created container in the lab's state (saved before it starts, so `down` finds
        it), then the node-side payload put in and its start time stamped."""
        info = NodeState(container=kwargs["name"], id=container.id,
                         rdma_dev=kwargs["labels"][f"{LABEL}.rdma-dev"])
        record.node(node, info)
        container.put_archive("/", node_payload(kwargs["environment"]))
        info.started = time.time()

    # --- readiness -----------------------------------------------------------------------
    def _containers(self, client: Any) -> dict[str, Any]:
        """This lab's containers, found by their labels (exact values, not name prefixes)."""
        found = client.containers.list(all=True, filters=lab_selector(self.lab.name))
        return {c.labels.get(f"{LABEL}.node", ""): c for c in found
                if owned_by(c.labels, self.lab.name, self.owner)}

    @property
    def owner(self) -> str:
        return labnet.owner_mark(self.labdir.path)

    @staticmethod
    def _logs(container: Any, info: NodeState | None) -> str:
        """The start of the container's log since its last start (a repaired node's old
        "ready" line must not count): the boot's stage, ready and fail lines are there. The
        log is what the node prints, any size: at most BOOT_LOG_BYTES are read."""
        since = info.started - 1 if info and info.started else None
        options: dict[str, Any] = {"since": since} if since else {}
        stream = container.logs(stream=True, follow=False, **options)
        chunks: list[bytes] = []
        size = 0
        try:
            for chunk in stream:
                chunks.append(chunk[: BOOT_LOG_BYTES - size])
                size += len(chunk)
                if size >= BOOT_LOG_BYTES:
                    break
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        return b"".join(chunks).decode(errors="replace")

    @abstractmethod
    def _clients(self, state: LabState) -> list[Any]:
        """Clients of every engine the lab's containers run in (the caller closes them)."""

    def _containers_of(self, clients: list[Any]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for client in clients:
            found.update(self._containers(client))
        return found

    def wait_ready(self, state: LabState, timeout: float, progress: Progress,
                   nodes: list[str] | None = None) -> None:
        clients = self._clients(state)
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        try:
            pending = set(state.nodes) if nodes is None else set(state.nodes) & set(nodes)
            while pending:
                containers = self._containers_of(clients)
                stages = {}
                for node in sorted(pending):
                    container = containers.get(node)
                    if container is None:
                        raise _failure(node, "its container is gone", "")
                    logs = self._logs(container, state.nodes[node])
                    if ready_line(logs) is not None:
                        pending.discard(node)
                        record_ready(state.nodes[node], logs)
                        continue
                    if FAIL in logs:
                        line = logs[logs.index(FAIL):].splitlines()[0]
                        raise _failure(node, line.removeprefix(FAIL).strip(), logs)
                    container.reload()
                    if container.status != "running":
                        raise _failure(node, f"container {container.status}", logs)
                    found = [ln for ln in logs.splitlines() if ln.startswith(STAGE)]
                    stages[node] = found[-1].removeprefix(STAGE) if found else "start"
                if not pending:
                    break
                if time.monotonic() > deadline:
                    slow = sorted(pending)[0]
                    raise _failure(slow, f"not ready after {timeout:.0f} s",
                                   self._logs(containers[slow], state.nodes[slow]))
                progress(f"starting ({time.monotonic() - started:.0f} s): "
                         + ", ".join(f"{n} {s}" for n, s in stages.items()))
                time.sleep(0.2)
        finally:
            for client in clients:
                client.close()

    # --- status, exec, destroy -----------------------------------------------------------
    def _runtime(self, node: str, container: Any, state: LabState,
                 details: dict[str, str]) -> NodeRuntime:
        """An existing container's node: stopped, or what its boot log says."""
        if container.status != "running":
            return NodeRuntime(node, NodeStatus.STOPPED, f"container {container.status}",
                               details)
        return runtime_from_boot_log(node, self._logs(container, state.nodes.get(node)),
                                     details)

    @abstractmethod
    def _base_url(self, node: str) -> str:
        """The URL of the engine `node`'s container runs in."""

    def exec_argv(self, node: str, command: list[str], *, tty: bool = False) -> list[str]:
        argv = ["docker", "-H", self._base_url(node), "exec", "-i"]
        if tty:
            argv.append("-t")
        return [*argv, container_name(self.lab.name, node), *(command or ["bash", "-l"])]

    def log_argv(self, node: str, *, lines: int, follow: bool) -> list[str]:
        """`docker logs` of the node's container on its engine: what its init printed."""
        return ["docker", "-H", self._base_url(node), "logs", "--tail", str(lines),
                *(["--follow"] if follow else []), container_name(self.lab.name, node)]

    def netns_argv(self, node: str, command: list[str]) -> list[str]:
        """From the engine's host with nsenter when labctl reaches it (a `docker exec`
        costs seconds under TCG; labctl/dockerhost/netns.py), else `docker exec`."""
        base_url = self._base_url(node)
        target = self._netns_targets.find(base_url, container_name(self.lab.name, node))
        argv = netns.netns_argv(base_url, *target, command) if target else None
        return argv or self.exec_argv(node, command)

    @functools.cached_property
    def _netns_targets(self) -> netns.Targets:
        targets = netns.Targets(self.lab.name)
        weakref.finalize(self, targets.close)  # its engine clients go with the provider
        return targets

    def destroy(self) -> list[str]:
        """Remove the lab's containers and what the engines hold of it, then the bind
        mounts of its host folders under the Docker host VM's share."""
        removed = self._destroy_engine_side()
        return removed + hostbinds.unbind_all(share_dir() / self.lab.name)

    @abstractmethod
    def _destroy_engine_side(self) -> list[str]:
        """Remove the lab's containers (by label) and its networks in the engines."""


class DockerProvider(ContainerProvider):
    """A lab in one engine: the Docker host VM or a local engine, links plumbed beside it."""

    capabilities = DOCKER

    def _check_engine(self) -> None:
        if self._single_engine_option() == "local":
            # Before anything of the lab is made: refused later, in create(), the lab's
            # directory stayed behind half-made (status said "phase creating").
            Engine("local", local_base_url()).client(timeout=10).close()

    def _engine(self, state: LabState | None = None) -> Engine:
        state = state or self.labdir.load_state()
        if state.engine is not None:
            return Engine.from_state(state.engine)
        raise LabctlError(f"lab {self.lab.name} has no engine recorded",
                          hint=f"`labctl down --lab {self.lab.name}`")

    # --- create --------------------------------------------------------------------------
    def create(self, record: StateRecorder, progress: Progress) -> None:
        engine = resolve_engine(self._single_engine_option(), progress)
        record.facts(engine=engine.to_state())  # before a container: `down` asks it
        client = engine.client(timeout=900)
        try:
            images = self._images(client, progress)
            facts = engine.helper("facts")
            if any(n.rdma == "rxe" for n in self.lab.nodes) and not facts.get("rdma_rxe"):
                raise LabctlError(f"rdma_rxe is not loaded in {engine.where}",
                                  hint="modprobe rdma_rxe there; `labctl doctor` checks it")
            if any(n.rdma == "siw" for n in self.lab.nodes) and not facts.get("siw"):
                raise LabctlError(f"siw is not loaded in {engine.where}",
                                  hint="modprobe siw there (Debian kernels lack it; the "
                                  "Docker host VM's image builds it)")
            vm_engine = engine.kind == "vm"
            if vm_engine and any(n.mounts for n in self.lab.nodes):
                self._share_with_vm(progress)
            plan = plan_lab(self.lab, images, str(facts.get("rdma_cm", "")), self.owner,
                            vm_engine)
            pids: dict[str, int] = {}
            for cplan in plan.containers:
                node = self.lab.node(cplan.node)
                kwargs = cplan.create
                progress(f"{node.name}: creating container {kwargs['name']}")
                try:
                    container = client.containers.create(**kwargs)
                except sdk().errors.APIError as exc:
                    raise LabctlError(f"cannot create container {kwargs['name']}: {exc}",
                                      hint="`labctl down` first if a lab of this name "
                                      "was left behind") from None
                self._record_and_load(record, node.name, kwargs, container)
                container.start()
                container.reload()
                pids[node.name] = int(container.attrs["State"]["Pid"])
            progress(f"links: netns {plan.netns} in {engine.where}")
            veths = [{**v, "pid": pids[v["node"]]} for v in plan.veths]
            engine.helper("plumb", json.dumps({"netns": plan.netns, "bridges": plan.bridges,
                                               "veths": veths, "owner": self.owner}))
            record.facts(veths=[v["host"] for v in veths])
        finally:
            client.close()

    def _single_engine_option(self) -> str:
        """--engine, unless the lab's `hosts:` put every node on one host."""
        ref = swarm.single_host_engine(self.lab)
        if ref is None:
            return self.engine_option
        if ref in ("local", "vm:default"):
            return ref.removeprefix("vm:").replace("default", "vm")
        raise UnsupportedError(
            f"all nodes of this lab are on one host ({ref}): links on one host need "
            "labctl's plumbing beside the engine, which it has for the default Docker host "
            "VM (vm:default) and a local engine only",
            hint="place the nodes on two or more hosts (a swarm lab), or drop hosts:")

    def _clients(self, state: LabState) -> list[Any]:
        return [self._engine(state).client()]

    def host_link(self, state: LabState, node: str, ifname: str) -> HostLink:
        """The bridge end of the node's veth (dockernet.py made it) in the lab's netns, in
        the kernel of the engine `state` records: this host's for a local engine, else the
        Docker host VM's."""
        if state.engine is None:
            raise LabctlError(f"lab {self.lab.name} has no engine recorded",
                              hint="is the lab up? see `labctl status`")
        in_vm = Engine.from_state(state.engine).kind == VM
        return HostLink(veth_name(self.lab.node(node), ifname), "veth",
                        labnet.netns_name(self.lab.name), VM if in_vm else HOST)

    def set_link_state(self, node: str, ifname: str, up: bool) -> None:
        """The veth's bridge end down: the node's interface loses its carrier (its rxe
        port goes DOWN), as qemu's set_link does for VM nodes."""
        state = self.labdir.load_state()
        veth = veth_name(self.lab.node(node), ifname)
        self._engine(state).helper("link", labnet.netns_name(self.lab.name),
                                   veth, "up" if up else "down")

    def stop_node(self, node: str) -> None:
        """The node's container is killed (no shutdown in it): its netns and veths go, its
        peers see what a crash shows them. The container stays, for `repair` to start."""
        client = self._engine(self.labdir.load_state()).client()
        try:
            container = self._containers(client).get(node)
            if container is None:
                raise LabctlError(f"lab {self.lab.name}: the container of {node} is gone",
                                  hint=f"`labctl down --lab {self.lab.name}`, then `labctl "
                                  "up` again")
            try:
                container.kill()
                container.wait(timeout=STOP_WAIT_SECONDS)
            except Exception as exc:  # the SDK raises many kinds
                raise LabctlError(f"docker did not stop {container.name}: {exc}",
                                  hint=f"`labctl status --lab {self.lab.name}`") from None
        finally:
            client.close()

    def repair(self, record: StateRecorder, nodes: list[str], progress: Progress) -> None:
        """Start stopped containers again; a restarted container has a new netns, so its
        veths are made again (its rxe is made by its init, as at the first start)."""
        engine = self._engine(record.state)
        client = engine.client()
        try:
            containers = self._containers(client)
            gone = [n for n in nodes if n not in containers]
            if gone:
                raise UnsupportedError(
                    f"the containers of {', '.join(gone)} were removed; the docker provider "
                    "restarts stopped containers only",
                    hint=f"`labctl down --lab {self.lab.name}`, then `labctl up` again")
            veths = []
            for name in nodes:
                progress(f"{name}: starting container {containers[name].name} again")
                info = record.state.nodes.get(name) or NodeState(
                    container=containers[name].name)
                info.clear_ready_facts()
                info.started = time.time()
                containers[name].start()
                record.node(name, info)
                containers[name].reload()
                pid = int(containers[name].attrs["State"]["Pid"])
                node = self.lab.node(name)
                veths += [{"host": veth_name(node, i.name), "bridge":
                           labnet.bridge_name(i.segment), "node": name, "name": i.name,
                           "mac": i.mac, "mtu": i.mtu, "pid": pid} for i in node.interfaces]
            # the netns named from the lab, never state.json's (data, not authority)
            engine.helper("replug", json.dumps({"netns": labnet.netns_name(self.lab.name),
                                                "veths": veths}))
        finally:
            client.close()

    # --- status, exec, destroy -----------------------------------------------------------
    def nodes(self) -> list[NodeRuntime]:
        state = self.labdir.load_state()
        try:
            engine = self._engine(state)
            client = engine.client(timeout=30)
        except LabctlError as exc:
            return [NodeRuntime(n.name, NodeStatus.STOPPED, exc.message) for n in self.lab.nodes]
        try:
            containers = self._containers(client)
            result = []
            for node in self.lab.nodes:
                container = containers.get(node.name)
                if container is None:
                    why = ("never started" if node.name not in state.nodes
                           else "its container is gone")
                    result.append(NodeRuntime(node.name, NodeStatus.ABSENT, why))
                    continue
                details = {"container": container.name, "engine": engine.where}
                result.append(self._runtime(node.name, container, state, details))
            return result
        finally:
            client.close()

    def _base_url(self, node: str) -> str:
        return self._engine().base_url

    def _share_with_vm(self, progress: Progress) -> None:
        """Each host folder bind-mounted under the VM's share (read-only for `:ro`)."""
        if not DockerHostVM().shares_host_folders():
            raise LabctlError("host folders (mounts): the Docker host VM was started "
                              "without the host-folder share (by an older labctl)",
                              hint="restart it when no lab uses it: `labctl docker-host "
                              "down`, then `labctl up` again")
        progress(f"host folders: bind mounts under {share_dir() / self.lab.name}")
        hostbinds.unbind_all(share_dir() / self.lab.name)  # what a crashed `up` left
        for node in self.lab.nodes:
            for i, mount in enumerate(node.mounts):
                hostbinds.bind(mount.source, vm_share_point(self.lab.name, node.name, i),
                               mount.readonly, f"node {node.name} (Docker host VM)")

    def _destroy_engine_side(self) -> list[str]:
        """Remove the lab's containers (by label) and its netns in the engine's kernel."""
        try:
            engine: Engine | None = self._engine()
        except CorruptStateError:
            engine = None
        except LabctlError:
            return []  # up died before choosing an engine: nothing was made there
        if engine is None:
            # state.json unreadable: the engine a docker lab uses is the Docker host VM
            # unless chosen otherwise; look there (and locally) by label.
            candidates = [Engine("vm", DockerHostVM().base_url)]
            if os.environ.get("LABCTL_DOCKER_ENGINE") == "local":
                candidates = [Engine("local", local_base_url())]
            reachable = [e for e in candidates if e.reachable()]
            if not reachable:
                return []
            engine = reachable[0]
        if not engine.reachable():
            if engine.kind == "vm":
                # Its containers stopped with the VM; the VM removes them when it next
                # starts (containers of labs without a lab directory).
                return ["nothing in the engine (the Docker host VM is not running)"]
            raise LabctlError(f"the Docker engine at {engine.base_url} does not answer",
                              hint="start it, then `labctl down` again")
        removed: list[str] = []
        client = engine.client()
        try:
            for container in self._containers(client).values():
                container.remove(force=True)
                removed.append(f"container {container.name}")
        finally:
            client.close()
        # The veths died with the containers' namespaces, and the rxe devices with them.
        answer = engine.helper("teardown", labnet.netns_name(self.lab.name), self.owner)
        removed += answer["removed"]
        return removed
