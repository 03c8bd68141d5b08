"""What each kind of provider can do, as data: the one place that knows it.

The topology checks, the lifecycle, `link`, `capture` and the CLI ask these records, never
a provider's name. Pure data with no labctl imports, so the topology layer (which must not
import providers) may read it. The provider classes expose their record as `capabilities`
(labctl/providers); a new provider adds its record here and nothing else branches on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

LinkDevice = Literal["tap", "veth", ""]


@dataclass(frozen=True)
class Capabilities:
    kind: str  # what messages call it
    # The lab-side end of a node's data interface that labctl makes: a tap in the lab's
    # netns on this host (qemu), a veth in the lab's netns in the engine's kernel (docker),
    # "" when the links are someone else's networks (libvirt, a swarm's overlays).
    link_device: LinkDevice
    links: str  # what the lab's links are, for refusals of link set, link show, capture
    netns: bool  # `up` makes a network namespace named after the lab (state.json records it)
    repair: bool  # nodes that stopped start again in place (up again, `labctl start`)
    node_stop: bool  # one node stops alone (`labctl stop`/`restart`)
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

    @property
    def link_set(self) -> bool:
        """`link set`/`link show` work: labctl holds each node's cable."""
        return bool(self.link_device)

    @property
    def capture(self) -> bool:
        """`capture` reads a node's link from the lab's side (its tap or veth)."""
        return bool(self.link_device)


QEMU = Capabilities(
    kind="qemu", link_device="tap", links="taps on the lab's bridges", netns=True,
    repair=True, node_stop=True, mounts=True, several_rdma_devices=True, pci_slots=True,
    own_memory=True, own_kernel=True, labctl_images=True, routing=True,
    node_setup="labctl's node init", hosts=False, found_by_name=True, node_bpf=True,
    saved_machines=True)
DOCKER = Capabilities(
    kind="docker", link_device="veth", links="veths on the lab's bridges", netns=True,
    repair=True, node_stop=True, mounts=True, several_rdma_devices=False, pci_slots=False,
    own_memory=False, own_kernel=False, labctl_images=True, routing=True,
    node_setup="labctl's node init", hosts=True, found_by_name=True, node_bpf=False,
    saved_machines=False)
# A docker lab whose nodes sit on two or more hosts (docs/multi-host.md).
SWARM = Capabilities(
    kind="multi-host docker", link_device="",
    links="the swarm's overlay networks (an overlay network has no per-node cable)",
    netns=False, repair=False, node_stop=False, mounts=False, several_rdma_devices=False,
    pci_slots=False, own_memory=False, own_kernel=False, labctl_images=True, routing=True,
    node_setup="labctl's node init", hosts=True, found_by_name=True, node_bpf=False,
    saved_machines=False)
VAGRANT = Capabilities(
    kind="vagrant", link_device="",
    links="the hypervisor's own networks (VirtualBox or libvirt)", netns=False,
    repair=True, node_stop=True, mounts=True, several_rdma_devices=False, pci_slots=False,
    own_memory=True, own_kernel=True, labctl_images=False, routing=False,
    node_setup="the Vagrantfile", hosts=False, found_by_name=False, node_bpf=True,
    saved_machines=False)

# The topology's `provider:` values, each with what a lab of it can do (a docker lab on
# several hosts is SWARM: only its placement tells, see for_lab).
BY_PROVIDER: dict[str, Capabilities] = {"qemu": QEMU, "docker": DOCKER, "vagrant": VAGRANT}
PROVIDERS = tuple(BY_PROVIDER)

# Choices `up` offers for a provider's nodes, one vocabulary for the CLI, the lifecycle and
# the checks of a lab's stored state: qemu's accelerator (auto probes KVM), and where a
# docker lab's engine runs (labctl's Docker host VM, or the local engine).
Accel = Literal["auto", "kvm", "tcg"]
ACCELS: tuple[str, ...] = get_args(Accel)
EngineKind = Literal["vm", "local"]
ENGINES: tuple[str, ...] = get_args(EngineKind)


def for_provider(provider: str) -> Capabilities:
    """What a lab of `provider` can do, as far as its topology tells (KeyError if unknown)."""
    return BY_PROVIDER[provider]


def offering(flag: str) -> list[str]:
    """The providers whose record has `flag` set, e.g. offering("hosts") == ["docker"]."""
    return [name for name, caps in BY_PROVIDER.items() if getattr(caps, flag)]
