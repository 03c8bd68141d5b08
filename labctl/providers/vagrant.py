"""The vagrant provider: labctl's Vagrantfile, driven by labctl.

`labctl up` runs `vagrant up` with labctl's Vagrantfile (labctl/data, VAGRANT_CWD) and
the lab's state kept in the lab directory (VAGRANT_DOTFILE_PATH=LABDIR/.vagrant). The
Vagrantfile reads the lab and its Vagrant plan (labctl.providers.vagrant_plan: boxes,
networks, MACs, node settings) from LABCTL_LAB_JSON (LABDIR/vagrant-lab.json, the same
JSON as `labctl validate --json --vagrant`) and works out nothing itself. Provisioning
there installs the node packages, the node-side code under /opt/labctl and a systemd unit
that creates the RDMA device at every boot.

With the libvirt provider, labctl boots its own node images (no box download, no package
installation in the nodes): `labctl image box` makes a Vagrant box of each image the nodes
use (labctl.images.box: trixie, trixie-dev, `packages:` lists), labctl adds them to Vagrant
and passes each node's box in LABCTL_BOXES, shares `mounts:` as virtiofs synced folders
(`:ro` ones through read-only bind mounts, labctl.providers.vagrant_mounts), starts
libvirtd when none runs (labctl.providers.libvirtd) and tells the Vagrantfile the libvirt
driver (kvm, or qemu = TCG when KVM does not really work here). Those choices are kept in
LABDIR/vagrant-env.json (labctl.providers.vagrant_settings) and go into the plan.

Afterwards labctl talks to the nodes with plain ssh, as with qemu nodes: `vagrant
ssh-config` is turned into LABDIR/ssh_config (user root, connection sharing), so `exec`,
`devinfo` and `run` cost one ssh round trip, not a Vagrant start-up each.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

import labctl.providers.libvirtd as libvirtd
import labctl.providers.vagrant_mounts as vagrant_mounts
import labctl.providers.vagrant_plan as vagrant_plan
import labctl.providers.vagrant_settings as vagrant_settings
from labctl import bounded, hostproc, safefs
from labctl.capabilities import VAGRANT
from labctl.data.recipes import RECIPES
from labctl.errors import LabctlError
from labctl.node import ssh
from labctl.node.ready import NodeRuntime
from labctl.node.replies import node_status
from labctl.nodeside import STATUS_COMMAND  # where the Vagrantfile installs it too
from labctl.progress import Progress
from labctl.providers.base import Provider, UnsupportedError
from labctl.providers.vagrant_plan import PLUGINS
from labctl.providers.vagrant_settings import VagrantSettings
from labctl.store.labdir import LabDir
from labctl.store.state import LabState, NodeState, NodeStatus, atomic_write
from labctl.store.state_recorder import StateRecorder
from labctl.topology.resolved import Lab, Node
from labctl.vm.machine import tail

UNIT = "labctl-node.service"
STATUS_TIMEOUT = 120
HALT_TIMEOUT = 300  # a forced halt is a power-off; the hypervisor may still be slow
INSTALL_HINT = (
    "install Vagrant (https://developer.hashicorp.com/vagrant/install; on Debian: "
    "apt-get install vagrant vagrant-libvirt libvirt-daemon-system)"
)


def vagrantfile_dir() -> Path:
    """The directory holding the Vagrantfile: labctl/data, so an installed labctl has it
    too (the checkout's top-level one loads it; LABCTL_VAGRANTFILE_DIR overrides)."""
    override = os.environ.get("LABCTL_VAGRANTFILE_DIR")
    if override:
        return Path(override)
    from labctl.data import data_path

    return data_path()


def rdma_device_name(node: Node) -> str:
    """The device the Vagrantfile creates: rxe0 / siw0 (as in qemu nodes), "" for none."""
    return f"{node.rdma}0" if node.rdma_interface is not None else ""


def parse_ssh_config(text: str) -> dict[str, list[tuple[str, str]]]:
    """`vagrant ssh-config` output: host -> [(keyword, value), ...] in order."""
    hosts: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        if key.lower() == "host":
            current = hosts.setdefault(value.strip(), [])
        elif current is not None:
            current.append((key, value.strip().strip('"')))
    return hosts


def render_ssh_config(path: Path, hosts: dict[str, list[tuple[str, str]]]) -> str:
    """Our ssh_config: labctl's options first (ssh keeps the first value it reads), then
    Vagrant's (HostName, Port, IdentityFile, algorithms...) for what we do not set. The
    box makes its own host keys: the first connection records each in the lab's
    known_hosts (accept-new), and from then on a changed key is refused."""
    ours = {**ssh.SSH_OPTIONS, "ControlPath": f"{path.parent}/cm-%C",
            "StrictHostKeyChecking": "accept-new",
            "UserKnownHostsFile": str(path.parent / "known_hosts")}
    ours_lower = {k.lower() for k in ours}
    lines: list[str] = []
    for host, options in sorted(hosts.items()):
        lines.append(f"Host {host}")
        lines += [f"  {key} {value}" for key, value in ours.items()]
        for key, value in options:
            if key.lower() not in ours_lower:
                quoted = f'"{value}"' if " " in value else value
                lines.append(f"  {key} {quoted}")
        lines.append("")
    return "\n".join(lines)


def parse_status(text: str) -> dict[str, str]:
    """`vagrant status --machine-readable` output: machine -> state (running, poweroff...)."""
    states: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(",", 3)
        if len(parts) == 4 and parts[2] == "state" and parts[1]:
            states[parts[1]] = parts[3].strip()
    return states


def _read_log(path: Path) -> str:
    try:
        return bounded.read_tail(path, 1 << 20)
    except (OSError, bounded.BoundedError):
        return "(no output)"


def _tail(text: str, lines: int = 25) -> str:
    return "".join(text.splitlines(keepends=True)[-lines:])


class VagrantProvider(Provider):
    name = "vagrant"
    capabilities = VAGRANT

    def __init__(self, lab: Lab, labdir: LabDir) -> None:
        super().__init__(lab, labdir)
        self.vagrant_provider: str = str(lab.provider_options.get("vagrant_provider") or "")

    # --- paths and environment -----------------------------------------------------------
    @property
    def dotfile_dir(self) -> Path:
        return self.labdir.path / ".vagrant"

    @property
    def log_file(self) -> Path:
        return self.labdir.path / "vagrant.log"

    def _open_log(self, *, append: bool) -> IO[str]:
        """vagrant.log for writing, never through a link planted there (safefs)."""
        fd = safefs.create(self.log_file, self.labdir.path, 0o640, append=append)
        return os.fdopen(fd, "a" if append else "w")

    @property
    def env_file(self) -> Path:
        """The choices of `up` (labctl.providers.vagrant_settings)."""
        return vagrant_settings.path_in(self.labdir.path)

    @property
    def plan_file(self) -> Path:
        """What the Vagrantfile reads: the lab and its Vagrant plan."""
        return self.labdir.path / "vagrant-lab.json"

    def write_plan(self) -> None:
        """The lab's plan with the choices of `up` (boxes, libvirt driver) over the
        environment's settings (LABCTL_VAGRANT_BOX...)."""
        env = {**os.environ, **vagrant_settings.read(self.labdir.path).env()}
        atomic_write(self.plan_file, vagrant_plan.document(self.lab, self.labdir.path, env))

    def vagrant_env(self) -> dict[str, str]:
        if not self.plan_file.is_file():  # a lab made before the plan was kept
            self.write_plan()
        env = dict(os.environ)
        env.pop("LABCTL_TOPOLOGY", None)  # the lab's plan decides, not a topology file
        env.pop("VAGRANT_VAGRANTFILE", None)
        env.update(
            VAGRANT_CWD=str(vagrantfile_dir()),
            VAGRANT_DOTFILE_PATH=str(self.dotfile_dir),
            LABCTL_LAB_JSON=str(self.plan_file),
        )
        return env

    def _vagrant(
        self, *args: str, timeout: float = STATUS_TIMEOUT, lab_env: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run vagrant; with `lab_env`, on this lab (Vagrantfile, dotfile dir, lab JSON)."""
        return hostproc.run(
            ["vagrant", *args],
            env=self.vagrant_env() if lab_env else None,
            # outside the lab, from /: no Vagrantfile of the working directory is read
            cwd=None if lab_env else "/",
            timeout=timeout,
            check=False,
            what=f"`vagrant {' '.join(args)}`",
            missing_hint=INSTALL_HINT,
            hint="check the hypervisor (virsh list --all / VBoxManage list runningvms)",
        )

    # --- host checks ---------------------------------------------------------------------
    def labctl_boxes(self) -> bool:
        """Whether the nodes boot labctl's own boxes: libvirt, no LABCTL_VAGRANT_BOX, every
        node's image one labctl builds. Otherwise the Vagrantfile's public Debian boxes."""
        return (self.vagrant_provider == "libvirt"
                and not os.environ.get("LABCTL_VAGRANT_BOX")
                and all(n.image in RECIPES for n in self.lab.nodes))

    def check_workbench(self) -> None:
        """The workbench keys need labctl's boxes: `packages:` and trixie-dev are images
        labctl builds, and host folders are virtiofs devices that the public Debian boxes
        (provisioned by the Vagrantfile, other providers without them) do not get."""
        if self.labctl_boxes():
            return
        wants = {
            "mounts (host folders)": [n.name for n in self.lab.nodes if n.mounts],
            "packages": [n.name for n in self.lab.nodes if n.packages],
            "image trixie-dev": [n.name for n in self.lab.nodes if n.image == "trixie-dev"],
        }
        missing = [f"{what} (nodes {', '.join(nodes)})" for what, nodes in wants.items() if nodes]
        if missing:
            why = (f"the Vagrant provider {self.vagrant_provider}" if
                   self.vagrant_provider != "libvirt" else "LABCTL_VAGRANT_BOX (a public box)")
            raise UnsupportedError(
                f"the vagrant provider cannot do {'; '.join(missing)} with {why}: only "
                "labctl's own boxes (libvirt) have them",
                hint="use libvirt without LABCTL_VAGRANT_BOX (LABCTL_VAGRANT_PROVIDER=libvirt) "
                "or the qemu provider; otherwise `labctl cp` copies files and `labctl exec "
                "NODE -- apt-get install ...` adds packages")

    def check_host(self) -> None:
        if shutil.which("vagrant") is None:
            raise LabctlError("vagrant not found", hint=INSTALL_HINT)
        if shutil.which("ssh") is None:
            raise LabctlError("ssh not found", hint="install an OpenSSH client")
        vagrantfile = vagrantfile_dir() / "Vagrantfile"
        if not vagrantfile.is_file():
            raise LabctlError(
                f"no Vagrantfile at {vagrantfile}",
                hint="the vagrant provider runs from a checkout of rdma-lab; "
                "or set LABCTL_VAGRANTFILE_DIR to the directory holding its Vagrantfile",
            )
        vagrant_plan.check_supported(self.lab)  # before anything is made
        self.vagrant_provider = self.choose_provider()
        self.check_workbench()

    def _plugins(self) -> set[str]:
        result = self._vagrant("plugin", "list", lab_env=False)  # before lab.json exists
        return {line.split()[0] for line in result.stdout.splitlines() if line.strip()}

    def choose_provider(self) -> str:
        """The Vagrant provider to use: asked for (LABCTL_VAGRANT_PROVIDER, then
        VAGRANT_DEFAULT_PROVIDER), else the first usable of libvirt, virtualbox,
        vmware_desktop, parallels. Raises with what to install when none is usable."""
        wanted = (
            self.vagrant_provider
            or os.environ.get("LABCTL_VAGRANT_PROVIDER", "")
            or os.environ.get("VAGRANT_DEFAULT_PROVIDER", "")
        )
        if wanted and wanted not in PLUGINS:
            raise LabctlError(
                f"Vagrant provider {wanted!r} is not configured by the Vagrantfile",
                hint=f"use one of: {', '.join(PLUGINS)} (LABCTL_VAGRANT_PROVIDER)",
            )
        plugins = self._plugins()

        def problem(provider: str) -> str | None:
            plugin = PLUGINS[provider]
            if plugin is not None and plugin not in plugins:
                return f"the {plugin} plugin is not installed (`vagrant plugin install {plugin}`)"
            if provider == "virtualbox" and shutil.which("VBoxManage") is None:
                return "VBoxManage not found (install VirtualBox)"
            return None

        if wanted:
            why = problem(wanted)
            if why is not None:
                raise LabctlError(f"the Vagrant provider {wanted} is not usable: {why}")
            return wanted
        for provider in PLUGINS:
            if problem(provider) is None:
                return provider
        raise LabctlError(
            "no usable Vagrant provider",
            hint="Linux: apt-get install vagrant-libvirt libvirt-daemon-system (or install "
            "VirtualBox); macOS/Windows: install VirtualBox, or VMware/Parallels with their "
            "Vagrant plugin; choose one with LABCTL_VAGRANT_PROVIDER. See docs/vagrant.md",
        )

    # --- create --------------------------------------------------------------------------
    def create(self, record: StateRecorder, progress: Progress) -> None:
        if not self.vagrant_provider:
            self.vagrant_provider = self.choose_provider()
        record.facts(vagrant_provider=self.vagrant_provider)
        for n in self.lab.nodes:
            record.node(n.name, NodeState(rdma_dev=rdma_device_name(n)))
        if self.vagrant_provider == "libvirt":
            self.prepare_libvirt(progress)
        self.write_plan()
        self._vagrant_up([], progress)
        progress("writing ssh_config")
        self.write_ssh_config()

    def stop_node(self, node: str) -> None:
        """`vagrant halt --force NODE`: the machine is powered off, no shutdown in it."""
        (self.labdir.path / f"cm-{node}").unlink(missing_ok=True)
        result = self._vagrant("halt", "--force", node, timeout=HALT_TIMEOUT)
        if result.returncode != 0:
            raise LabctlError(f"`vagrant halt --force {node}` failed (exit "
                              f"{result.returncode}): {_tail(result.stderr, 5)}",
                              hint=f"`labctl status --lab {self.lab.name}`; the hypervisor's "
                              "own view: virsh list --all / VBoxManage list vms")

    def repair(self, record: StateRecorder, nodes: list[str], progress: Progress) -> None:
        """`vagrant up NODE...` boots stopped machines (the unit makes the device again)."""
        if not self.vagrant_provider:
            self.vagrant_provider = record.state.vagrant_provider
        for name in nodes:
            (self.labdir.path / f"cm-{name}").unlink(missing_ok=True)
        if self.labctl_boxes():  # a host reboot took the read-only bind mounts away
            vagrant_mounts.bind_readonly(self.lab, self.labdir.path)
        self.write_plan()  # the node-side code of the labctl that runs now
        self._vagrant_up(nodes, progress)
        self.write_ssh_config()

    def prepare_libvirt(self, progress: Progress) -> None:
        """libvirtd running (started here when none runs), labctl's box of the nodes' image
        built and added to Vagrant, and the libvirt driver chosen by a real KVM probe."""
        settings = VagrantSettings()
        vagrant_settings.write(self.labdir.path, settings)  # from here on, `down` releases libvirtd
        started = libvirtd.ensure_running()
        if started is not None:
            progress(f"libvirtd running (pid {started.libvirtd}, started by labctl)")
        if not self.labctl_boxes():
            progress("no labctl box for these nodes: the Vagrantfile's public box")
        else:
            from labctl.images.box import build_box
            from labctl.vm.accel import kvm_works

            # One box per distinct image (trixie-dev, each `packages:` list): per node.
            boxes = {}
            for image in dict.fromkeys((n.image, n.packages) for n in self.lab.nodes):
                boxes[image] = build_box(image[0], image[1], progress=progress)
                self._add_box(boxes[image].name, boxes[image].file, progress)
            first = next(iter(boxes.values()))
            driver = os.environ.get("LABCTL_LIBVIRT_DRIVER") or (
                "kvm" if kvm_works(first.path / "vmlinux") else "qemu")
            settings = VagrantSettings(
                boxes={n.name: boxes[(n.image, n.packages)].name for n in self.lab.nodes},
                libvirt_driver=driver)
            progress(f"boxes {', '.join(b.name for b in boxes.values())}, libvirt driver "
                     f"{driver}")
            if any(m.readonly for n in self.lab.nodes for m in n.mounts):
                progress("read-only bind mounts of the :ro folders")
                vagrant_mounts.bind_readonly(self.lab, self.labdir.path)
        vagrant_settings.write(self.labdir.path, settings)

    def _add_box(self, name: str, path: Path, progress: Progress) -> None:
        listed = self._vagrant("box", "list", "--machine-readable", lab_env=False)
        if f",box-name,{name}" in listed.stdout:
            return
        progress(f"vagrant box add {name}")
        result = self._vagrant("box", "add", "--force", "--name", name, str(path),
                               timeout=600, lab_env=False)
        if result.returncode != 0:
            raise LabctlError(f"vagrant box add {name} failed: {_tail(result.stderr, 5)}",
                              hint=f"try `vagrant box add --name {name} {path}` by hand")

    def _vagrant_up(self, nodes: list[str], progress: Progress) -> None:
        argv = ["vagrant", "up", "--provider", self.vagrant_provider, "--no-color", *nodes]
        progress(f"vagrant up {' '.join(nodes)}({self.vagrant_provider})")
        started = time.monotonic()
        with self._open_log(append=bool(nodes)) as log:
            try:
                proc = subprocess.Popen(
                    argv,
                    env=self.vagrant_env(),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            except FileNotFoundError:
                raise LabctlError("vagrant not found", hint=INSTALL_HINT) from None
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                log.flush()
                text = line.strip()
                if text.startswith("==> "):
                    elapsed = time.monotonic() - started
                    progress(f"({elapsed:.0f} s) {text.removeprefix('==> ')}"[:160])
            code = proc.wait()
        if code != 0:
            raise LabctlError(
                f"vagrant up failed (exit {code})\n--- vagrant output ({self.log_file}) ---\n"
                + _tail(_read_log(self.log_file)),
                hint=f"fix the cause, then `labctl down --lab {self.lab.name}` removes what "
                "was made",
            )

    def write_ssh_config(self) -> None:
        result = self._vagrant("ssh-config")
        hosts = parse_ssh_config(result.stdout)
        missing = [n.name for n in self.lab.nodes if n.name not in hosts]
        if result.returncode != 0 or missing:
            raise LabctlError(
                f"`vagrant ssh-config` gave no ssh settings for {', '.join(missing) or 'the lab'}"
                f": {result.stderr.strip()}",
                hint="see `labctl status`; `labctl down` removes what was made",
            )
        path = self.labdir.ssh_config
        atomic_write(path, render_ssh_config(path, hosts), 0o600)

    # --- readiness -----------------------------------------------------------------------
    def ready_check(self, node: Node) -> list[str]:
        """The command that succeeds in `node` when its unit ran and its port is ACTIVE."""
        # labctl's box has no systemd: its boot runs the bring-up, node.env says it was set up
        check = (f"if [ -d /run/systemd/system ]; then systemctl is-active --quiet {UNIT}; "
                 "else test -f /etc/labctl/node.env; fi")
        device = rdma_device_name(node)
        if device:
            check += f" && grep -q ACTIVE /sys/class/infiniband/{device}/ports/1/state"
        return ["sh", "-c", check]

    def wait_ready(self, state: LabState, timeout: float, progress: Progress,
                   nodes: list[str] | None = None) -> None:
        if not self.labdir.ssh_config.exists():
            self.write_ssh_config()
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        waited = [n for n in self.lab.nodes if nodes is None or n.name in nodes]
        pending = list(waited)
        while pending:
            for node in list(pending):
                argv = self.exec_argv(node.name, self.ready_check(node))
                # Only the exit code counts; what the node prints is kept bounded.
                try:
                    result = hostproc.run(argv, timeout=60, limit=64 << 10, check=False)
                except hostproc.HostProcessError as exc:
                    if not exc.timed_out:
                        raise
                    result = exc.result  # not ready yet: the deadline decides
                if result.returncode == 0:
                    pending.remove(node)
            if not pending:
                break
            if time.monotonic() > deadline:
                raise self._not_ready(pending[0], timeout)
            progress(
                f"waiting for {', '.join(n.name for n in pending)} "
                f"({time.monotonic() - started:.0f} s)"
            )
            time.sleep(1)
        progress("reading device facts")
        with ThreadPoolExecutor(max_workers=len(waited) or 1) as pool:
            facts = list(pool.map(self.device_facts, waited))
        for node, found in zip(waited, facts, strict=True):
            info = state.nodes.setdefault(node.name, NodeState(rdma_dev=rdma_device_name(node)))
            info.port_state = str(found.get("port_state", ""))
            info.active_mtu = str(found.get("active_mtu", ""))
            info.gid_index = found.get("gid_index")

    def device_facts(self, node: Node) -> dict[str, Any]:
        """Port state, active MTU and RoCE v2 GID index of the node's device, as the qemu
        provider records them from its ready line (`labctl status` after `up` shows them,
        runs use the GID index). Empty when the node cannot tell."""
        device = rdma_device_name(node)
        if not device:
            return {}
        command = STATUS_COMMAND
        try:  # the node's reply is untrusted: bounded, and every field checked
            result = hostproc.run(self.exec_argv(node.name, command), timeout=120, check=False)
            devices = node_status(result, node.name)["devices"]
        except LabctlError:  # HostProcessError too
            return {}
        for record in devices:
            if record["name"] == device:
                return {key: record[key] for key in ("port_state", "active_mtu", "gid_index")}
        return {}

    def _not_ready(self, node: Node, timeout: float) -> LabctlError:
        console = self.labdir.path / f"console-{node.name}.log"
        if console.is_file():  # labctl's box has no systemd: its boot reports on the console
            source, report = console.name, tail(console)
        else:
            try:
                journal = hostproc.run(
                    self.exec_argv(node.name,
                                   ["journalctl", "-u", UNIT, "-b", "-n", "25", "--no-pager"]),
                    timeout=60, limit=64 << 10, check=False)
            except hostproc.HostProcessError as exc:  # the message must still be made
                journal = exc.result
            source, report = f"journalctl -u {UNIT}", journal.stdout + journal.stderr
        device = rdma_device_name(node) or "(no device)"
        return LabctlError(
            f"node {node.name}: {device} not ACTIVE after {timeout:.0f} s\n"
            f"--- {source} ---\n{report}",
            hint=f"`vagrant provision {node.name}` (with VAGRANT_CWD, VAGRANT_DOTFILE_PATH "
            f"as in {self.log_file.parent}) re-runs the setup; `labctl down` removes the lab",
        )

    # --- status, exec, destroy -----------------------------------------------------------
    def _ssh_endpoints(self) -> dict[str, str]:
        try:
            hosts = parse_ssh_config(bounded.read_text(self.labdir.ssh_config))
        except (OSError, ValueError):
            return {}
        result = {}
        for host, options in hosts.items():
            values = {k.lower(): v for k, v in reversed(options)}  # first value wins
            result[host] = f"{values.get('hostname', '?')}:{values.get('port', '22')}"
        return result

    def _machines(self) -> list[str]:
        """Machines Vagrant created for this lab (an id file in the dotfile directory)."""
        base = self.dotfile_dir / "machines"
        if not base.is_dir():
            return []
        return sorted(
            f"{machine.name} ({provider.name})"
            for machine in base.iterdir()
            for provider in (machine.iterdir() if machine.is_dir() else [])
            if (provider / "id").is_file()
        )

    def nodes(self) -> list[NodeRuntime]:
        state = self.labdir.load_state()
        provider = state.vagrant_provider or "?"
        if not self._machines():
            return [NodeRuntime(n.name, NodeStatus.ABSENT, "never created")
                    for n in self.lab.nodes]
        result = self._vagrant("status", "--machine-readable")
        if result.returncode != 0:
            reason = f"vagrant status failed: {_tail(result.stderr, 3).strip()}"
            return [NodeRuntime(n.name, NodeStatus.FAILED, reason) for n in self.lab.nodes]
        states = parse_status(result.stdout)
        endpoints = self._ssh_endpoints()
        runtimes = []
        for node in self.lab.nodes:
            vstate = states.get(node.name, "unknown")
            details = {"vagrant": provider}
            if node.name in endpoints:
                details["ssh"] = endpoints[node.name]
            if vstate == "running":
                runtimes.append(NodeRuntime(node.name, NodeStatus.RUNNING, "", details))
            elif vstate == "not_created":
                runtimes.append(NodeRuntime(node.name, NodeStatus.ABSENT, "not created",
                                            details))
            else:
                runtimes.append(NodeRuntime(node.name, NodeStatus.STOPPED, f"vagrant: {vstate}",
                                            details))
        return runtimes

    def exec_argv(self, node: str, command: list[str], *, tty: bool = False) -> list[str]:
        return ssh.ssh_argv(self.labdir.ssh_config, node, command, tty=tty)

    def console_log(self, node: str) -> Path | None:
        """The serial console libvirt writes for labctl's own box (the Vagrantfile's
        console_log); another box has none: None."""
        console = self.labdir.path / f"console-{node}.log"
        return console if console.is_file() else None

    def destroy(self) -> list[str]:
        if self.labdir.ssh_config.exists():
            ssh.close_masters(self.labdir.ssh_config)  # every socket: Vagrant names them cm-%C
        machines = self._machines()
        if not machines:
            removed = vagrant_mounts.unbind(self.labdir.path)
            if self.env_file.exists():  # an `up` that failed early may have started libvirtd
                libvirtd.release(removed)
            return removed
        if shutil.which("vagrant") is None:
            raise LabctlError(
                f"vagrant not found, and the lab still has VMs: {', '.join(machines)}",
                hint=f"{INSTALL_HINT}, then run `labctl down` again",
            )
        if not self.labdir.lab_file.is_file():
            raise LabctlError(
                f"{self.labdir.lab_file} is missing: the Vagrantfile cannot name the VMs "
                f"({', '.join(machines)})",
                hint="remove them with virsh/VBoxManage, then delete the lab directory",
            )
        result = self._vagrant("destroy", "-f", "--no-color", timeout=900)
        with self._open_log(append=True) as log:
            log.write(result.stdout + result.stderr)
        if result.returncode != 0:
            raise LabctlError(
                f"vagrant destroy failed (exit {result.returncode}):\n"
                + _tail(result.stdout + result.stderr),
                hint="fix the cause and run `labctl down` again (the lab directory is kept)",
            )
        removed = [f"vagrant VM {m}" for m in machines]
        removed += vagrant_mounts.unbind(self.labdir.path)  # after virtiofsd is gone
        if any(m.endswith("(libvirt)") for m in machines) or self.env_file.exists():
            libvirtd.forget_networks([f"labctl-{self.lab.name}-mgmt"] + [
                f"labctl-{self.lab.name}-{segment.name}" for segment in self.lab.segments])
            libvirtd.release(removed)
        return removed
