"""A lab's lifecycle as a service: up (or repair), destroy. The CLI commands, the
benchmarks and the integration tests' fixtures all call these; none of them prints.

up       resolve the topology, create the lab directory, let the provider make and start
         every node and wait until each RDMA device is ACTIVE. Run on a lab that is up from
         the same topology, it repairs: nodes that stopped start again (disks and addresses
         kept), or, with nothing stopped, it leaves the lab as it is. A lab that is up from
         a changed topology is refused with the list of changes (LabChangedError), unless
         `recreate` takes it down first.
stop_node / start_node / restart_node
         one node down as a crash looks to its peers, and up again as a repair starts it.
destroy  remove every trace of a lab, from lab.json and state.json when they can be read,
         else from what is found without them (pidfiles, the netns named after the lab,
         container labels). Holds the lab's lock until the directory is gone and returns
         only once every process it stopped has exited.

State: this module owns state.json's writes and phases. `up` writes it (phase creating)
before the provider makes anything, and saves it after each step: the provider's create
(phase still creating), its repair (phase repairing) and the wait for readiness (phase up,
with the seconds it took). Within a step a provider records each node the moment it
exists through the step's StateRecorder (labctl/store/state_recorder.py), so that a crash half-way
leaves `status` and `down` a pid or container to find; the qemu provider saves its nodes'
records once they are all started (a qemu's own pidfile names it meanwhile), since each
save writes the whole lab's state.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from labctl.capabilities import (
    ACCELS,
    ENGINES,
    Capabilities,
    either,
    for_provider,
    offering,
    providers,
)
from labctl.errors import LabctlError, UsageError
from labctl.lab.handle import LabHandle
from labctl.lab.status import LabStatusRecord, collect_status
from labctl.net import labnet
from labctl.progress import Progress
from labctl.providers import provider_for
from labctl.providers.base import Provider, UnsupportedError
from labctl.store import scratch
from labctl.store.labdir import LabDir, check_lab_name
from labctl.store.state import CorruptStateError, LabState, NodeStatus, Phase
from labctl.store.state_recorder import StateRecorder
from labctl.topology.compare import lab_changes
from labctl.topology.lookup import require_node
from labctl.topology.resolved import Lab

# A node in one of these is not running: a repair (or `labctl start`) starts it again.
DOWN_STATES = (NodeStatus.STOPPED, NodeStatus.ABSENT)
BOOTS = ("restore", "cold")
BOOT_ENV = "LABCTL_BOOT"
MAX_CHANGES_SHOWN = 20  # a rewritten topology is not listed line by line to the end


def _quiet(_message: str) -> None:
    pass


@dataclass(frozen=True)
class UpOptions:
    accel: str = "auto"  # qemu: auto (probe KVM), kvm or tcg
    mirror: str | None = None  # Debian mirror for image builds
    timeout: float = 300  # seconds for every node to be ready
    provider: str | None = None  # overrides the topology's
    engine: str | None = None  # docker: vm or local (else LABCTL_DOCKER_ENGINE, else vm)
    mounts: tuple[str, ...] = ()  # --mount SRC:DST[:ro], for every node (SRC from the cwd)
    kernel: str | None = None  # --kernel SOURCE, for every node (a path from the cwd)
    name: str | None = None  # overrides the topology's (the pytest plugin's --rdma-lab-name)
    # --allow-host-mount PATH: host folders mounts may share although they are the host's own
    allow_host_mounts: tuple[str, ...] = ()
    recreate: bool = False  # a lab that is up is taken down first, changed or not
    # qemu: restore nodes from a saved machine, or boot them cold; None: $LABCTL_BOOT, else
    # restore (docs/lifecycle.md, "Restored nodes")
    boot: str | None = None

    def boot_mode(self) -> str:
        return self.boot or os.environ.get(BOOT_ENV) or "restore"

    def check(self) -> None:
        if self.accel not in ACCELS:
            raise UsageError(f"--accel must be auto, kvm or tcg (got {self.accel!r})",
                             hint="auto uses KVM when /dev/kvm is usable, else tcg")
        if self.engine is not None and self.engine not in ENGINES:
            raise UsageError(f"--engine must be vm or local (got {self.engine!r})",
                             hint="vm: the Docker host VM; local: this host's engine")
        if self.boot_mode() not in BOOTS:
            where = "--boot" if self.boot else BOOT_ENV
            raise UsageError(f"{where} must be restore or cold (got {self.boot_mode()!r})",
                             hint="restore (the default) or cold (every node boots)")
        if self.provider is not None and self.provider not in providers():
            raise UsageError(
                f"--provider must be {either(providers())} (got {self.provider!r})",
                hint="or leave it out: the topology's provider: (default qemu)")


@dataclass
class UpResult:
    """What `up` did, all that `labctl up` prints (up_result makes it)."""

    lab: Lab
    labdir: LabDir
    seconds: float
    # each node's state and device as its ready line said (the nodes are not asked again)
    status: LabStatusRecord
    restored: list[str]  # qemu: the nodes restored from a saved machine; the others booted
    repaired: list[str] = field(default_factory=list)  # a repair: the nodes started again
    already_up: bool = False  # up from the same topology, every node running: left as it was
    removed: list[str] = field(default_factory=list)  # --recreate: what `down` removed first


def up_result(labdir: LabDir, seconds: float, *, repaired: list[str] | None = None,
              already_up: bool = False, removed: list[str] | None = None) -> UpResult:
    """The result of an `up` of `labdir`'s lab that has just finished: its status read
    through one handle of its own (a LabDir of its own too: the caller's may outlive
    this command, as the pytest plugin's does, and must not keep a remembered state)."""
    from labctl.vm.restore import restored_nodes

    handle = LabHandle(LabDir(labdir.name, labdir.path.parent))
    return UpResult(handle.lab, labdir, seconds,
                    status=collect_status(handle, live=False),
                    restored=restored_nodes(handle.labdir.load_state()),
                    repaired=repaired or [], already_up=already_up, removed=removed or [])


class LabChangedError(UsageError):
    """`up` of a lab that is up from another version of its topology."""

    def __init__(self, name: str, changes: list[str], hint: str) -> None:
        shown = changes[:MAX_CHANGES_SHOWN]
        more = len(changes) - len(shown)
        lines = [f"  - {line}" for line in shown] + ([f"  ... and {more} more"] if more else [])
        super().__init__(f"lab {name} is up from a different topology:\n" + "\n".join(lines),
                         hint=hint)
        self.changes = changes


def resolve(topology: Path, options: UpOptions, progress: Progress = _quiet) -> Lab:
    """The topology's lab with the options applied. Nothing of the lab is made; a
    `debian:VERSION` kernel is fetched into the kernel cache the first time (an unknown
    version is refused here, exit 2) and named by its folder from here on."""
    from labctl.topology.host import HostFacts, resolve_allowances
    from labctl.topology.kernelsource import with_kernel
    from labctl.topology.load import load_lab
    from labctl.topology.workbench import with_extra_mounts

    options.check()
    allowances = resolve_allowances(options.allow_host_mounts)
    lab = load_lab(topology, allowances=allowances, host=HostFacts.this())
    lab = with_extra_mounts(lab, options.mounts, Path.cwd(), allowances)
    if options.kernel is not None:
        lab = with_kernel(lab, options.kernel, Path.cwd())
    provider_options = dict(lab.provider_options)
    provider_options["accel"] = options.accel
    if options.mirror:
        provider_options["mirror"] = options.mirror
    if options.engine is not None:
        provider_options["engine"] = options.engine
    if options.provider is not None:
        lab = dataclasses.replace(lab, provider=options.provider)
    # a cold lab's lab.json has no key (nor has a lab of a provider without saved machines)
    if for_provider(lab.provider).saved_machines and options.boot_mode() == "restore":
        provider_options["boot"] = "restore"
    if options.name is not None:
        lab = dataclasses.replace(lab, name=check_lab_name(options.name))
    if for_provider(lab.provider).kernel_choice:  # else _check_supported refuses it
        from labctl.images.debian_kernels import with_debian_kernels
        lab = with_debian_kernels(lab, options.mirror, progress)
    return dataclasses.replace(lab, provider_options=provider_options)


def _allowances(options: UpOptions) -> tuple[Path, ...]:
    from labctl.topology.host import resolve_allowances
    return resolve_allowances(options.allow_host_mounts)


def up(topology: Path, options: UpOptions | None = None, progress: Progress = _quiet, *,
       resolved: Lab | None = None) -> UpResult:
    """Start the lab of `topology`, or repair it if it is up; see the module's doc.
    `resolved`: what resolve(topology, options) returned, when the caller has it (the
    topology is then not read again)."""
    options = options or UpOptions()
    lab = resolved or resolve(topology, options, progress)
    labdir = LabDir(lab.name)
    started = time.monotonic()
    provider = provider_for(lab, labdir)
    _check_supported(lab, provider)
    removed: list[str] = []
    if options.recreate or not labdir.exists():
        # Before the lock makes the lab's directory (and before --recreate removes the lab
        # that runs): a host that cannot run the lab (no Docker engine answers, no qemu...)
        # is refused with nothing of the lab left behind.
        provider.check_host()
    if options.recreate:
        removed = destroy(lab.name)
    with labdir.locked("up"):
        if labdir.exists():
            return _up_again(topology, lab, labdir, options, progress, started)
        labdir.create(lab, _allowances(options))
        # Before anything exists: `status` and `down` know what to look for from here on.
        state = LabState(provider=lab.provider, phase=Phase.CREATING,
                         netns=labnet.netns_name(lab.name)
                         if provider.capabilities.netns else "")
        labdir.save_state(state)
        try:
            provider.create(StateRecorder(labdir, state), progress)
            labdir.save_state(state)
            _wait_ready(provider, labdir, state, options.timeout, progress)
        except BaseException as exc:
            if _under_ctrl_c(exc):  # Ctrl-C, or a cleanup that failed under it
                raise KeyboardInterrupt from exc
            if isinstance(exc, LabctlError):
                raise
            raise LabctlError(
                f"up failed: {exc!r}",
                hint=f"`labctl down --lab {lab.name}` removes what was made") from exc
    return up_result(labdir, time.monotonic() - started, removed=removed)


def _under_ctrl_c(exc: BaseException) -> bool:
    """`exc` is Ctrl-C, or was raised while one was being handled: seen live, a Ctrl-C
    landing inside a qemu's start made a file descriptor's cleanup fail with EBADF, and
    `up` said "up failed: OSError(9, ...)" instead of what was interrupted."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__context__
    return False


def _check_supported(lab: Lab, provider: Provider) -> None:
    """Refuse (exit 2, nothing made) what the lab asks that its provider cannot do and
    only its placement tells (the topology checks refused the rest)."""
    mounted = [n.name for n in lab.nodes if n.mounts]
    if mounted and not provider.capabilities.mounts:
        raise UnsupportedError(
            f"host folders (mounts) are not supported for {provider.capabilities.kind} labs "
            f"(nodes {', '.join(mounted)})",
            hint="drop mounts: and --mount; `labctl cp` copies files into a node")
    check_own_kernels(lab, provider.capabilities)


def check_own_kernels(lab: Lab, capabilities: Capabilities) -> None:
    """Refuse (exit 2, nothing made) a kernel of the nodes' own that their provider cannot
    boot, or whose configuration lacks what the nodes need (`up`, and `matrix` for every
    kernel before its first lab)."""
    own = [n.name for n in lab.nodes if n.kernel_path is not None]
    if own and not capabilities.kernel_choice:
        raise UnsupportedError(
            f"{capabilities.kind} nodes cannot boot a kernel of their own (nodes "
            f"{', '.join(own)})", hint="use --provider qemu, or drop kernel: and --kernel")
    if own:  # its configuration against what the nodes need
        from labctl.images.kernels import check_kernels
        check_kernels(lab.nodes)


def _up_again(topology: Path, lab: Lab, labdir: LabDir, options: UpOptions,
              progress: Progress, started: float) -> UpResult:
    """`up` of a lab that is up (under its lock): the same lab is repaired or left as it
    is; a changed one is refused with what changed."""
    stored = _fully_created(labdir)
    changes = lab_changes(stored, lab)
    if changes:
        again = shlex.join(["labctl", "up", str(topology),
                            *(["--name", lab.name] if options.name else []), "--recreate"])
        raise LabChangedError(lab.name, changes,
                              hint=f"`{again}` takes the lab down and makes it again from "
                              f"the topology (fresh disks); or `labctl down --lab {lab.name}`")
    repaired = repair(labdir, options.timeout, progress)
    return up_result(labdir, time.monotonic() - started, repaired=repaired,
                     already_up=not repaired)


def _fully_created(labdir: LabDir) -> Lab:
    """The lab that is up; refused when its first `up` died half-way."""
    lab = labdir.load_lab()
    phase = labdir.load_state().phase
    if phase not in (Phase.UP, Phase.REPAIRING):
        raise LabctlError(
            f"lab {lab.name} was never fully created (its `up` stopped in phase {phase})",
            hint=f"`labctl down --lab {lab.name}` removes what was made; then `labctl up` again",
        )
    return lab


def repair(labdir: LabDir, timeout: float, progress: Progress = _quiet) -> list[str]:
    """Start again the nodes of a lab that is up whose process or container stopped, and
    return them (none: nothing to do); refuse a lab that never was fully created."""
    lab = _fully_created(labdir)
    provider = provider_for(lab, labdir)
    dead = [n.name for n in provider.nodes() if n.state in DOWN_STATES]
    if dead:
        _start(provider, labdir, dead, timeout, progress, wait_for=None)
    return dead


def stop_node(labdir: LabDir, node: str) -> None:
    """Take `node` down as a crash looks to its peers (its process or container ends, no
    shutdown); the rest of the lab runs on. UsageError if it is already down."""
    with labdir.locked("stop"):
        lab, provider, state = _node_of(labdir, node)
        if state in DOWN_STATES:
            raise UsageError(f"node {node} of lab {lab.name} is already stopped",
                             hint=f"`labctl start {node} --lab {lab.name}` starts it again")
        provider.stop_node(node)


def start_node(labdir: LabDir, node: str, timeout: float,
               progress: Progress = _quiet) -> None:
    """Start a stopped `node` again as a repair does (disk, addresses and MACs kept) and
    wait until its RDMA device is ACTIVE. UsageError if it is not stopped."""
    with labdir.locked("start"):
        lab, provider, state = _node_of(labdir, node)
        if state not in DOWN_STATES:
            raise UsageError(f"node {node} of lab {lab.name} is not stopped (it is {state})",
                             hint=f"`labctl restart {node} --lab {lab.name}` stops it and "
                             "starts it again")
        _start(provider, labdir, [node], timeout, progress, wait_for=[node])


def restart_node(labdir: LabDir, node: str, timeout: float,
                 progress: Progress = _quiet) -> None:
    """Stop `node` (unless it is stopped already) and start it again, under one lock."""
    with labdir.locked("restart"):
        _lab, provider, state = _node_of(labdir, node)
        if state not in DOWN_STATES:
            progress(f"{node}: stopping")
            provider.stop_node(node)
        # only this node: another one the user stopped stays stopped, and is no failure
        _start(provider, labdir, [node], timeout, progress, wait_for=[node])


def _start(provider: Provider, labdir: LabDir, nodes: list[str], timeout: float,
           progress: Progress, wait_for: list[str] | None) -> None:
    """The repair step (phase repairing once the nodes are started again), then the wait
    for `wait_for` (None: every node)."""
    state = labdir.load_state()
    provider.repair(StateRecorder(labdir, state), nodes, progress)
    state.phase = Phase.REPAIRING
    labdir.save_state(state)
    _wait_ready(provider, labdir, state, timeout, progress, wait_for)


def _wait_ready(provider: Provider, labdir: LabDir, state: LabState, timeout: float,
                progress: Progress, nodes: list[str] | None = None) -> None:
    """The readiness step: the nodes' ready facts, phase up and how long it took, saved."""
    started = time.monotonic()
    provider.wait_ready(state, timeout, progress, nodes)
    state.phase = Phase.UP
    state.ready_seconds = round(time.monotonic() - started, 1)
    labdir.save_state(state)


def _node_of(labdir: LabDir, node: str) -> tuple[Lab, Provider, NodeStatus]:
    """The lab, its provider and the state of its node `node` (checked to be one of its)."""
    lab = _fully_created(labdir)
    require_node(lab, node)
    provider = provider_for(lab, labdir)
    state = next(n.state for n in provider.nodes() if n.name == node)
    return lab, provider, state


def _lab_for_down(labdir: LabDir) -> tuple[Lab, list[str]]:
    """The lab to destroy, and the providers to ask: from lab.json, else from state.json's
    provider, else every provider that can clean up from the lab's name alone (and the
    first of these stands in for the lab's provider)."""
    try:
        lab = labdir.load_lab()
        return lab, [lab.provider]
    except LabctlError:  # missing (up died before writing it) or corrupt
        pass
    try:
        provider = labdir.load_state().provider
    except CorruptStateError:
        provider = ""
    by_name = offering("found_by_name")
    stub = Lab(labdir.name, provider or by_name[0], "", (), ())
    return stub, [provider] if provider else by_name


def destroy(name: str) -> list[str]:
    """Remove lab `name`: processes (waited for), containers, netns, lab directory."""
    labdir = LabDir(name)
    removed: list[str] = []
    netns = labnet.netns_name(name)
    # names are global, labs per state dir: only a namespace of this lab directory's
    owner = labnet.owner_mark(labdir.path)
    if labdir.is_link() or not labdir.path.exists():
        # A symlinked lab directory is not followed: what it points at is not the lab's.
        if labdir.remove():
            removed.append(f"symbolic link {labdir.path} (not followed)")
        if labnet.delete_netns(netns, owner):
            removed.append(f"netns {netns}")
        if (folder := scratch.remove_scratch(name)) is not None:
            removed.append(folder)
        return removed
    with labdir.locked("down"):
        lab, providers = _lab_for_down(labdir)
        for provider in providers:
            removed += provider_for(dataclasses.replace(lab, provider=provider),
                                    labdir).destroy()
        if labnet.delete_netns(netns, owner):
            removed.append(f"netns {netns}")
        # Still under the lock: no `up` of the same name starts in a half-removed directory.
        if labdir.remove():
            removed.append(f"lab directory {labdir.path}")
        if (folder := scratch.remove_scratch(name)) is not None:  # its tmpfs, if it had one
            removed.append(folder)
    return removed
