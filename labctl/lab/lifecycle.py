"""A lab's lifecycle as a service: up (or repair), destroy. The CLI commands, the
benchmarks and the integration tests' fixtures all call these; none of them prints.

up       resolve the topology, create the lab directory, let the provider make and start
         every node and wait until each RDMA device is ACTIVE. Run on a lab that is up, it
         repairs: nodes that stopped start again (disks and addresses kept), or it refuses.
destroy  remove every trace of a lab, from lab.json and state.json when they can be read,
         else from what is found without them (pidfiles, the netns named after the lab,
         container labels). Holds the lab's lock until the directory is gone and returns
         only once every process it stopped has exited.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

from labctl.errors import LabctlError, UsageError
from labctl.lab.labdir import LabDir, check_lab_name
from labctl.lab.state import CorruptStateError, NodeStatus, Phase
from labctl.net import labnet
from labctl.providers import provider_for
from labctl.providers.base import Progress
from labctl.topology.resolved import Lab

ACCELS = ("auto", "kvm", "tcg")
PROVIDERS = ("qemu", "docker", "vagrant")
ENGINES = ("vm", "local")


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
    name: str | None = None  # overrides the topology's (the pytest plugin's --rdma-lab-name)
    # --allow-host-mount PATH: host folders mounts may share although they are the host's own
    allow_host_mounts: tuple[str, ...] = ()

    def check(self) -> None:
        if self.accel not in ACCELS:
            raise UsageError(f"--accel must be auto, kvm or tcg (got {self.accel!r})")
        if self.engine is not None and self.engine not in ENGINES:
            raise UsageError(f"--engine must be vm or local (got {self.engine!r})")
        if self.provider is not None and self.provider not in PROVIDERS:
            raise UsageError(
                f"--provider must be qemu, docker or vagrant (got {self.provider!r})")


@dataclass
class UpResult:
    lab: Lab
    labdir: LabDir
    seconds: float
    repaired: list[str] = field(default_factory=list)  # a repair: the nodes started again


def resolve(topology: Path, options: UpOptions) -> Lab:
    """The topology's lab with the options applied (nothing is made)."""
    from labctl.topology.host import HostFacts, resolve_allowances
    from labctl.topology.load import load_lab
    from labctl.topology.workbench import with_extra_mounts

    options.check()
    allowances = resolve_allowances(options.allow_host_mounts)
    lab = load_lab(topology, allowances=allowances, host=HostFacts.this())
    lab = with_extra_mounts(lab, options.mounts, Path.cwd(), allowances)
    provider_options = dict(lab.provider_options)
    provider_options["accel"] = options.accel
    if options.mirror:
        provider_options["mirror"] = options.mirror
    if options.engine is not None:
        provider_options["engine"] = options.engine
    if options.provider is not None:
        lab = dataclasses.replace(lab, provider=options.provider)
    if options.name is not None:
        lab = dataclasses.replace(lab, name=check_lab_name(options.name))
    return dataclasses.replace(lab, provider_options=provider_options)


def up(topology: Path, options: UpOptions | None = None,
       progress: Progress = _quiet) -> UpResult:
    """Start the lab of `topology`, or repair it if it is up; see the module's doc."""
    options = options or UpOptions()
    lab = resolve(topology, options)
    labdir = LabDir(lab.name)
    started = time.monotonic()
    provider = provider_for(lab, labdir)
    if not labdir.exists():
        # Before the lock makes the lab's directory: a host that cannot run the lab (no
        # Docker engine answers, no qemu...) is refused with nothing of the lab left behind.
        provider.check_host()
    with labdir.locked("up"):
        if labdir.exists():
            if options.mounts:  # a repair restarts nodes as they were made
                raise UsageError(f"--mount: lab {lab.name} is already up; folders are given "
                                 "when a lab is made",
                                 hint=f"`labctl down --lab {lab.name}`, then `labctl up` with "
                                 "--mount (or use `labctl cp`)")
            repaired = repair(labdir, options.timeout, progress)
            return UpResult(labdir.load_lab(), labdir, time.monotonic() - started, repaired)
        labdir.create(lab)
        try:
            provider.create(progress)
            provider.wait_ready(options.timeout, progress)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | LabctlError):
                raise
            raise LabctlError(
                f"up failed: {exc!r}",
                hint=f"`labctl down --lab {lab.name}` removes what was made") from exc
    return UpResult(lab, labdir, time.monotonic() - started)


def repair(labdir: LabDir, timeout: float, progress: Progress = _quiet) -> list[str]:
    """Start again the nodes of a lab that is up whose process or container stopped;
    refuse a lab that never was fully created, or one with nothing to repair."""
    lab = labdir.load_lab()
    phase = labdir.load_state().phase
    if phase not in (Phase.UP, Phase.REPAIRING):  # the first `up` died half-way
        raise LabctlError(
            f"lab {lab.name} was never fully created (its `up` stopped in phase {phase})",
            hint=f"`labctl down --lab {lab.name}` removes what was made; then `labctl up` again",
        )
    provider = provider_for(lab, labdir)
    dead = [n.name for n in provider.nodes() if n.state in (NodeStatus.STOPPED,
                                                           NodeStatus.ABSENT)]
    if not dead:
        raise LabctlError(
            f"lab {lab.name} is already up ({labdir.path})",
            hint=f"`labctl down --lab {lab.name}` first, or use it as it is",
        )
    provider.repair(dead, progress)
    provider.wait_ready(timeout, progress)
    return dead


def _lab_for_down(labdir: LabDir) -> tuple[Lab, list[str]]:
    """The lab to destroy, and the providers to ask: from lab.json, else from state.json's
    provider, else every provider that can clean up from the lab's name alone."""
    try:
        lab = labdir.load_lab()
        return lab, [lab.provider]
    except LabctlError:  # missing (up died before writing it) or corrupt
        pass
    try:
        provider = labdir.load_state().provider
    except CorruptStateError:
        provider = ""
    stub = Lab(labdir.name, provider or "qemu", "", (), ())
    return stub, [provider] if provider else ["qemu", "docker"]


def destroy(name: str) -> list[str]:
    """Remove lab `name`: processes (waited for), containers, netns, lab directory."""
    labdir = LabDir(name)
    removed: list[str] = []
    netns = labnet.netns_name(name)
    if labdir.is_link() or not labdir.path.exists():
        # A symlinked lab directory is not followed: what it points at is not the lab's.
        if labdir.remove():
            removed.append(f"symbolic link {labdir.path} (not followed)")
        if labnet.delete_netns(netns):
            removed.append(f"netns {netns}")
        return removed
    with labdir.locked("down"):
        lab, providers = _lab_for_down(labdir)
        for provider in providers:
            removed += provider_for(dataclasses.replace(lab, provider=provider),
                                    labdir).destroy()
        if labnet.delete_netns(netns):
            removed.append(f"netns {netns}")
        # Still under the lock: no `up` of the same name starts in a half-removed directory.
        if labdir.remove():
            removed.append(f"lab directory {labdir.path}")
    return removed
