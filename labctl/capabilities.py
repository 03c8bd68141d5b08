"""The providers labctl knows and what each can do, as data: the one place that lists them.

The topology checks, the lifecycle, `link`, `capture` and the CLI ask these records, never
a provider's name. Pure data with no labctl imports, so the topology layer (which must not
import providers) may read it. Each provider is registered here once, by name, with its
record and the provider class that makes its labs, named as text (imported only when a lab
of it is made: the providers import the Docker SDK, qemu's and Vagrant's plumbing). Every
list of providers (the topology's `provider:` values, the state a lab keeps, `up
--provider`, the lifecycle's choice of class) is read from this registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args


@dataclass(frozen=True)
class Capabilities:
    kind: str  # what messages call it
    # labctl holds each node's cable: the lab-side end of every data interface is a device
    # labctl made on the lab's bridge (Provider.host_link says which and where); False when
    # the links are someone else's networks (the hypervisor's, a swarm's overlays).
    host_links: bool
    links: str  # what the lab's links are, for refusals of link set, link show, capture
    netns: bool  # `up` makes a network namespace named after the lab (state.json records it)
    mounts: bool  # host folders in the nodes
    several_rdma_devices: bool  # rdma_interfaces: a device per data interface
    pci_slots: bool  # NICs and mounts share the slots of qemu's `pc` machine
    own_memory: bool  # a node's memory is its own (a VM): the host must have it
    # a node's kernel is its own (a VM): every RDMA device it lists is the node's; containers
    # share the engine's kernel, which (shared netns mode) lists every node's devices
    own_kernel: bool
    labctl_images: bool  # nodes boot labctl's image recipes, so image names are checked
    routing: bool  # routers and routes (labctl sets the nodes' forwarding and routes)
    node_setup: str  # what sets the nodes up (the refusal of routing says it)
    hosts: bool  # `hosts:` places the nodes on several engines
    found_by_name: bool  # `down` finds what it made from the lab's name alone (no lab.json)
    # root in a node may load eBPF programs (a VM's own kernel): what `labctl fault` needs;
    # containers have NET_ADMIN only
    node_bpf: bool
    # `up` restores nodes from a saved machine unless --cold (docs/lifecycle.md, "Restored
    # nodes"): booted VMs saved with the hypervisor's own migration
    saved_machines: bool
    # nodes boot the kernel a topology's `kernel:` names (labctl starts the VM's kernel
    # itself); False: the node's kernel is its host's, its engine's or its box's
    kernel_choice: bool = False

    @property
    def link_set(self) -> bool:
        """`link set`/`link show` work: labctl holds each node's cable."""
        return self.host_links

    @property
    def capture(self) -> bool:
        """`capture` reads a node's link from the lab's side (its tap or veth)."""
        return self.host_links


QEMU = Capabilities(
    kind="qemu", host_links=True, links="taps on the lab's bridges", netns=True,
    mounts=True, several_rdma_devices=True, pci_slots=True,
    own_memory=True, own_kernel=True, labctl_images=True, routing=True,
    node_setup="labctl's node init", hosts=False, found_by_name=True, node_bpf=True,
    saved_machines=True, kernel_choice=True)
DOCKER = Capabilities(
    kind="docker", host_links=True, links="veths on the lab's bridges", netns=True,
    mounts=True, several_rdma_devices=False, pci_slots=False,
    own_memory=False, own_kernel=False, labctl_images=True, routing=True,
    node_setup="labctl's node init", hosts=True, found_by_name=True, node_bpf=False,
    saved_machines=False)
# A docker lab whose nodes sit on two or more hosts (docs/multi-host.md).
SWARM = Capabilities(
    kind="multi-host docker", host_links=False,
    links="the swarm's overlay networks (an overlay network has no per-node cable)",
    netns=False, mounts=False, several_rdma_devices=False,
    pci_slots=False, own_memory=False, own_kernel=False, labctl_images=True, routing=True,
    node_setup="labctl's node init", hosts=True, found_by_name=True, node_bpf=False,
    saved_machines=False)
VAGRANT = Capabilities(
    kind="vagrant", host_links=False,
    links="the hypervisor's own networks (VirtualBox or libvirt)", netns=False,
    mounts=True, several_rdma_devices=False, pci_slots=False,
    own_memory=True, own_kernel=True, labctl_images=False, routing=False,
    node_setup="the Vagrantfile", hosts=False, found_by_name=False, node_bpf=True,
    saved_machines=False)


@dataclass(frozen=True)
class HostVerdict:
    """How `labctl doctor` judges whether this host can run a provider's labs (on one of its
    engines): from doctor's checks, by name. It works when labctl runs as root (if `root`)
    and every check of `needs` is ok; with a `probe`, the probe decides once doctor could
    run it, and before that the provider is `available` (it starts what it needs)."""

    engine: EngineKind | None  # the engine this verdict is for (docker's vm, local), or None
    needs: dict[str, str]  # doctor's check name -> what a "no" says is needed
    works: str  # the detail of a provider that works
    root: bool = False
    no: str = ""  # the detail of one that does not, when not "needs" + what is missing
    subject: str = ""  # what the "needs ..." detail is about ("the Docker host VM ")
    probe: str = ""  # doctor's check that tries the provider's nodes for real, if any
    available: str = ""  # the detail before the probe could run
    probe_failed: str = ""  # the detail when the probe failed


@dataclass(frozen=True)
class Registered:
    """A provider as the topology names it (`provider: NAME`)."""

    name: str
    capabilities: Capabilities  # what a lab of it can do, as far as its topology tells
    # "module:callable" that makes the provider of a lab: called with (Lab, LabDir), it
    # returns a labctl.providers.base.Provider
    factory: str
    nodes: str  # what its nodes are, in the topology's description of `provider:`
    # `labctl doctor`'s verdicts for it, one per engine (none: doctor does not judge it)
    host: tuple[HostVerdict, ...] = ()


# The topology's `provider:` values, in the order messages list them. A docker lab on
# several hosts is SWARM: its factory looks at the placement.
_REGISTRY: dict[str, Registered] = {}


def register(name: str, capabilities: Capabilities, factory: str, nodes: str,
             host: tuple[HostVerdict, ...] = ()) -> None:
    """Add a provider: from here on topologies may name it, the lifecycle makes its labs
    with `factory` and `labctl doctor` judges this host for it by `host`. ValueError when
    the name is taken."""
    if name in _REGISTRY:
        raise ValueError(f"provider {name!r} is already registered")
    _REGISTRY[name] = Registered(name, capabilities, factory, nodes, host)


def unregister(name: str) -> None:
    """Remove a provider that register() added (tests that register their own)."""
    del _REGISTRY[name]


# What doctor's verdicts rest on, by the names of its checks (labctl/cli/doctor.py).
_QEMU_TOOLS = {"qemu tools": "the qemu tools"}
register("qemu", QEMU, "labctl.providers.qemu:QemuProvider", "qemu VMs", host=(
    HostVerdict(None, _QEMU_TOOLS, "one qemu VM per node", root=True),))
register("docker", DOCKER, "labctl.providers.docker_swarm:docker_provider",
         "docker containers", host=(
             HostVerdict("vm", _QEMU_TOOLS, "rxe works in the running Docker host VM",
                         root=True, subject="the Docker host VM ",
                         probe="per-netns rxe (VM)",
                         available="the Docker host VM starts on demand",
                         probe_failed="the Docker host VM runs but its rxe probe failed"),
             HostVerdict("local", {"Docker engine (local)": "a local Docker engine",
                                   "per-netns rxe (host)": "a host kernel that passes the "
                                                           "per-netns probe"},
                         "containers on this host's engine and kernel",
                         no="needs a local Docker engine and a host kernel that passes the "
                            "per-netns probe")))
register("vagrant", VAGRANT, "labctl.providers.vagrant:VagrantProvider", "vagrant")


def providers() -> tuple[str, ...]:
    """The names a topology's `provider:` may have."""
    return tuple(_REGISTRY)


def host_verdicts() -> list[tuple[str, HostVerdict]]:
    """Each (provider, verdict) `labctl doctor` gives, in the registry's order."""
    return [(name, verdict) for name, entry in _REGISTRY.items() for verdict in entry.host]


def registered(provider: str) -> Registered:
    """The registry's entry of `provider` (KeyError if unknown)."""
    return _REGISTRY[provider]


# Choices `up` offers for a provider's nodes, one vocabulary for the CLI, the lifecycle and
# the checks of a lab's stored state: qemu's accelerator (auto probes KVM), and where a
# docker lab's engine runs (labctl's Docker host VM, or the local engine).
Accel = Literal["auto", "kvm", "tcg"]
ACCELS: tuple[str, ...] = get_args(Accel)
EngineKind = Literal["vm", "local"]
ENGINES: tuple[str, ...] = get_args(EngineKind)


def for_provider(provider: str) -> Capabilities:
    """What a lab of `provider` can do, as far as its topology tells (KeyError if unknown)."""
    return _REGISTRY[provider].capabilities


def offering(flag: str) -> list[str]:
    """The providers whose record has `flag` set, e.g. offering("hosts") == ["docker"]."""
    return [name for name, entry in _REGISTRY.items() if getattr(entry.capabilities, flag)]


def either(names: list[str] | tuple[str, ...], word: str = "or") -> str:
    """"qemu, docker or vagrant": names as a message lists them."""
    if len(names) < 2:
        return "".join(names)
    return f"{', '.join(names[:-1])} {word} {names[-1]}"
