"""The topology file as typed models: what a user writes, validated key by key.

These models only check each value on its own (types, ranges, name patterns, address
syntax). Checks that relate values to each other (endpoints naming defined nodes,
interfaces used once, subnets not overlapping...) live in `labctl.topology.load`, which
also turns every failure into one `TopologyError` with the file's line number.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr
from pydantic_core import PydanticCustomError

from labctl import capabilities
from labctl.errors import short_repr
from labctl.topology.kernelsource import IMAGE_KERNEL, check_kernel
from labctl.topology.resolved import ProviderName, Rdma
from labctl.topology.workbench import (
    MAX_MOUNTS,
    MAX_PACKAGES,
    WorkbenchValueError,
    check_package,
    parse_mount,
)

LAB_NAME_RE = r"^[a-z][a-z0-9-]{0,19}$"
NODE_NAME_RE = r"^[a-z][a-z0-9-]{0,14}$"
LINK_NAME_RE = r"^[a-z][a-z0-9-]{0,14}$"
IMAGE_RE = r"^[a-z0-9][a-z0-9._-]*$"
IFNAME_RE = r"eth[1-9][0-9]?"
ENDPOINT_RE = rf"^[a-z][a-z0-9-]{{0,14}}:{IFNAME_RE}$"
HOST_NAME_RE = r"^[a-z][a-z0-9-]{0,14}$"
# A host's engine: `local`, a labctl Docker host VM (`vm:NAME`), an ssh:// or unix:// engine
# URL, or a docker context name. Plain characters only: it reaches the Docker SDK and ssh.
ENGINE_RE = (r"^(local|vm:[a-z][a-z0-9]{0,7}|ssh://[A-Za-z0-9._-]+@?[A-Za-z0-9._-]*(:[0-9]{1,5})?"
             r"|unix:///[A-Za-z0-9._/-]+|[A-Za-z0-9][A-Za-z0-9_.-]{0,63})$")

RDMA_TYPES = ("rxe", "siw", "none")
# What the nodes of each registered provider are ("qemu VMs, docker containers or vagrant")
_NODES_OF_PROVIDERS = capabilities.either(
    [capabilities.registered(name).nodes for name in capabilities.providers()])

DEFAULT_POOL = "10.77.0.0/16"
DEFAULT_PREFIX = 24
MAX_PREFIX = 30
MAX_NODES = 250  # a node's index is one byte of its MACs (checks._mac)
# Each link is a Linux bridge that `up` makes, and each endpoint a host interface (tap or
# veth): 6000 links are 12000 of those, 24 links per node of the largest lab, where a qemu
# node has PCI slots for 26 (host.QEMU_PC_SLOTS). resolve's cost is measured at this size
# (tests/unit/test_hostile_input.py, test_many_links_resolve_in_linear_time).
MAX_LINKS = 6000

# Data segments stay inside the RFC 1918 ranges: they never leave the lab's namespace,
# but an address that looks public or loopback would only confuse.
PRIVATE_NETWORKS = tuple(
    ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)

# The nodes' eth0: qemu user networking (and Vagrant's NAT) put it there. A data segment
# there would make the node's routes ambiguous; the pool skips it, explicit subnets may not.
MANAGEMENT_NETWORK = ipaddress.IPv4Network("10.0.2.0/24")

HostName = Annotated[str, Field(pattern=HOST_NAME_RE)]
EngineRef = Annotated[str, Field(pattern=ENGINE_RE, max_length=200)]


def _check_ipv4_network(value: str) -> str:
    """Accept "a.b.c.d/len" naming a private IPv4 network (no host bits set)."""
    try:
        if "/" not in value:
            raise ValueError(value)
        net = ipaddress.IPv4Network(value, strict=False)
    except ValueError:
        raise PydanticCustomError(
            "ipv4_network",
            f"must be an IPv4 network like 10.77.0.0/16 (got {short_repr(value)})",
        ) from None
    if str(net) != value:
        host_bits = str(net.network_address) != value.split("/")[0]
        what = "has host bits set" if host_bits else "is not in canonical form"
        raise PydanticCustomError("ipv4_network", f"{value!r} {what}; did you mean {net}?")
    if not any(net.subnet_of(p) for p in PRIVATE_NETWORKS):
        raise PydanticCustomError(
            "ipv4_private",
            f"{value} is not a private network; use one inside 10.0.0.0/8, 172.16.0.0/12 "
            "or 192.168.0.0/16",
        )
    if net.prefixlen > MAX_PREFIX:
        raise PydanticCustomError(
            "ipv4_prefix",
            f"{value} is too small: the prefix length must be at most /{MAX_PREFIX} "
            "(room for two hosts)",
        )
    return value


def _check_ipv4_address(value: str) -> str:
    """Accept a dotted-quad IPv4 address (a gateway)."""
    try:
        address = ipaddress.IPv4Address(value)
    except ValueError:
        raise PydanticCustomError(
            "ipv4_address", f"must be an IPv4 address like 10.77.1.1 (got {short_repr(value)})"
        ) from None
    if str(address) != value:
        raise PydanticCustomError("ipv4_address", f"{value!r} is not in canonical form; "
                                  f"did you mean {address}?")
    return value


Ipv4Address = Annotated[
    str,
    Field(json_schema_extra={"pattern": r"^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$"},
          examples=["10.77.1.1"]),
    AfterValidator(_check_ipv4_address),
]
Ipv4Network = Annotated[
    str,
    Field(
        json_schema_extra={"pattern": r"^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+/[0-9]+$"},
        examples=["10.77.0.0/16"],
    ),
    AfterValidator(_check_ipv4_network),
]
def _workbench_value(check: Any) -> Any:
    """An AfterValidator from a `labctl.topology.workbench` check: its message and hint
    reach the user as they are (see problems.problem_from_pydantic)."""

    def validate(value: str) -> str:
        try:
            check(value)
        except WorkbenchValueError as exc:
            raise PydanticCustomError("labctl_value", "{message}",
                                      {"message": exc.message, "hint": exc.hint}) from None
        return value

    return AfterValidator(validate)


PackageName = Annotated[str, Field(examples=["libibverbs-dev"]), _workbench_value(check_package)]
KernelText = Annotated[str, Field(examples=["image", "../linux"]),
                      _workbench_value(check_kernel)]
MountText = Annotated[str, Field(examples=["./src:/work", "./data:/data:ro"]),
                      _workbench_value(parse_mount)]
NodeName = Annotated[str, Field(pattern=NODE_NAME_RE)]
Endpoint = Annotated[str, Field(pattern=ENDPOINT_RE, examples=["node1:eth1"])]

_MEMORY_DESC = "MiB of guest RAM (128..65536)."
_CPUS_DESC = "Number of virtual CPUs (1..64)."
_IMAGE_DESC = "Node image name, as built by `labctl image build`."
_RDMA_DESC = (
    "Software RDMA device on the node's first data interface: rxe (Soft-RoCE), "
    "siw (soft-iWARP) or none."
)
_MTU_DESC = "MTU of data links (576..9000)."
_PACKAGES_DESC = (
    "Debian packages added to the node image (an image of its own, built once and cached); "
    "a node's list adds to the defaults' list."
)
_KERNEL_DESC = (
    "Kernel a qemu node boots: image (the node image's own), or the path of a kernel build "
    "tree after `make`, or of a folder made by `make modules_install INSTALL_MOD_PATH=DIR` "
    "with the bzImage or vmlinuz in it (relative to the topology file's directory)."
)
_MOUNTS_DESC = (
    'Host folders in the node: "SRC:DST" (read-write) or "SRC:DST:ro" (read-only); SRC '
    "relative to the topology file's directory, DST an absolute path in the node. A node's "
    "list adds to the defaults' list."
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Defaults(_Strict):
    """Settings applied to every node (and link) that does not set its own."""

    model_config = ConfigDict(title="Defaults")

    rdma: Rdma = Field(title="RDMA device", default="rxe", description=_RDMA_DESC)
    memory: int = Field(
        title="Memory (MiB)", default=512, ge=128, le=65536, description=_MEMORY_DESC
    )
    cpus: int = Field(title="CPUs", default=1, ge=1, le=64, description=_CPUS_DESC)
    image: str = Field(title="Image", default="trixie", pattern=IMAGE_RE, description=_IMAGE_DESC)
    mtu: int = Field(title="MTU", default=1500, ge=576, le=9000, description=_MTU_DESC)
    packages: list[PackageName] = Field(title="Extra packages", default_factory=list,
                                        max_length=MAX_PACKAGES, description=_PACKAGES_DESC)
    mounts: list[MountText] = Field(title="Host folders", default_factory=list,
                                    max_length=MAX_MOUNTS, description=_MOUNTS_DESC)
    kernel: KernelText = Field(title="Kernel", default=IMAGE_KERNEL, description=_KERNEL_DESC)


class Addressing(_Strict):
    """Where data segment subnets come from."""

    model_config = ConfigDict(title="Addressing")

    pool: Ipv4Network = Field(
        title="Address pool",
        default=DEFAULT_POOL,
        description="Private IPv4 pool the segments' subnets are taken from, in link order "
        "(the pool's first subnet is never used).",
    )
    prefix: int = Field(
        title="Segment prefix length",
        default=DEFAULT_PREFIX,
        ge=1,
        le=MAX_PREFIX,
        description="Prefix length of each segment's subnet; longer than the pool's, at most 30.",
    )


class RouteSpec(_Strict):
    """A static route in a node: packets for `to` go through the gateway `via`."""

    model_config = ConfigDict(title="Route")

    to: Ipv4Network = Field(
        title="Destination",
        description="A network of this lab the node is not on (a segment's subnet, or a "
        "network holding some).",
        examples=["10.77.2.0/24"],
    )
    via: Ipv4Address = Field(
        title="Gateway",
        description="Address of a router (router: true) on one of the node's own segments.",
        examples=["10.77.1.1"],
    )


class NodeSpec(_Strict):
    """One node (a VM or container). Every key is optional and overrides `defaults`."""

    model_config = ConfigDict(title="Node")

    rdma: Rdma | None = Field(title="RDMA device", default=None, description=_RDMA_DESC)
    memory: int | None = Field(
        title="Memory (MiB)", default=None, ge=128, le=65536, description=_MEMORY_DESC
    )
    cpus: int | None = Field(title="CPUs", default=None, ge=1, le=64, description=_CPUS_DESC)
    image: str | None = Field(
        title="Image", default=None, pattern=IMAGE_RE, description=_IMAGE_DESC
    )
    packages: list[PackageName] | None = Field(title="Extra packages", default=None,
                                               max_length=MAX_PACKAGES,
                                               description=_PACKAGES_DESC)
    mounts: list[MountText] | None = Field(title="Host folders", default=None,
                                           max_length=MAX_MOUNTS, description=_MOUNTS_DESC)
    kernel: KernelText | None = Field(title="Kernel", default=None, description=_KERNEL_DESC)
    router: bool | None = Field(
        title="Router",
        default=None,
        description="Forward IPv4 between the node's segments (net.ipv4.ip_forward=1). "
        "When a lab has routers, every node gets a route to each segment it is not on, "
        "through the nearest router (see routes).",
    )
    routes: list[RouteSpec] | None = Field(
        title="Static routes",
        default=None,
        description="Routes of this node, each {to: NETWORK, via: GATEWAY}; they replace "
        "the computed routes to the segments they cover.",
    )
    rdma_interfaces: list[Annotated[str, Field(pattern=f"^{IFNAME_RE}$")]] | None = Field(
        title="RDMA interfaces",
        default=None,
        min_length=1,
        description="Data interfaces that get an RDMA device each (default: the first one "
        "only), e.g. [eth1, eth2]: rxe0 on eth1, rxe1 on eth2. qemu nodes only.",
        examples=[["eth1", "eth2"]],
    )
    host: HostName | None = Field(
        title="Host",
        default=None,
        description="Docker provider with `hosts`: the host (a key of `hosts`) whose engine "
        "runs this node; default: round-robin over `hosts` in node order.",
        examples=["h2"],
    )


class LinkSpec(_Strict):
    """One L2 segment: two endpoints make a point-to-point link, more make a switch."""

    model_config = ConfigDict(title="Link")

    endpoints: list[Endpoint] = Field(
        title="Endpoints",
        min_length=2,
        description='Interfaces joined by this segment, as "node:ethN" (N in 1..99; eth0 is '
        "the management interface). Addresses go to them in this order.",
        examples=[["node1:eth1", "node2:eth1"]],
    )
    name: str | None = Field(
        title="Segment name",
        default=None,
        pattern=LINK_NAME_RE,
        description='Segment name (default "link<N>", N counting links from 1); unique.',
    )
    mtu: int | None = Field(
        title="MTU", default=None, ge=576, le=9000, description="MTU of this segment (576..9000)."
    )
    subnet: Ipv4Network | None = Field(
        title="Subnet",
        default=None,
        description="Explicit subnet for this segment instead of one from the pool; "
        "must not overlap another segment's.",
    )


class Topology(_Strict):
    """An rdma-lab topology file: nodes with software RDMA devices joined by links."""

    model_config = ConfigDict(
        title="rdma-lab topology",
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"},
    )

    name: str = Field(
        title="Lab name",
        pattern=LAB_NAME_RE,
        description="Lab name: a lowercase letter, then up to 19 of a-z, 0-9 and '-'. "
        "Used in network namespace names and MAC addresses.",
        examples=["two-node"],
    )
    provider: ProviderName = Field(
        title="Provider",
        default="qemu",
        description=f"How nodes are run: {_NODES_OF_PROVIDERS}.",
    )
    defaults: Defaults = Field(
        title="Defaults",
        default_factory=lambda: Defaults(),
        description="Values for every node (rdma, memory, cpus, image, packages, mounts, "
        "kernel) "
        "and link (mtu) "
        "that does not set its own.",
    )
    addressing: Addressing = Field(
        title="Addressing",
        default_factory=lambda: Addressing(),
        description="The pool data segment subnets are cut from, and their prefix length.",
    )
    nodes: dict[NodeName, NodeSpec | None] = Field(
        title="Nodes",
        min_length=1,
        description="Nodes by name (a lowercase letter, then up to 14 of a-z, 0-9 and '-'), "
        "in a stable order; a node may be empty ({} or nothing).",
        json_schema_extra={"additionalProperties": False},
    )
    links: list[LinkSpec] = Field(
        title="Links",
        default_factory=list,
        description="Data segments, each an L2 network of its own.",
    )
    hosts: dict[HostName, EngineRef] = Field(
        title="Hosts",
        default_factory=dict,
        description="Docker provider: the Docker engines a lab spreads over, by host name: "
        "`local`, `vm:NAME` (a labctl Docker host VM, `labctl docker-host up --name NAME`), "
        "an engine URL (ssh://user@host) or a docker context name. With two or more hosts "
        "in use, links are Docker Swarm overlay networks (docs/multi-host.md).",
        examples=[{"h1": "vm:sw1", "h2": "vm:sw2"}],
        json_schema_extra={"additionalProperties": False},
    )

    # The composed YAML document this topology was read from, when it was read from a file:
    # lets later checks (in `resolve`) name the line of a bad value.
    _yaml_root: Any = PrivateAttr(default=None)
    _source: str | None = PrivateAttr(default=None)


# Per-model key names, for "did you mean" hints on unknown keys.
MODEL_KEYS: dict[str, tuple[str, ...]] = {
    "topology": tuple(Topology.model_fields),
    "defaults": tuple(Defaults.model_fields),
    "addressing": tuple(Addressing.model_fields),
    "node": tuple(NodeSpec.model_fields),
    "link": tuple(LinkSpec.model_fields),
    "route": tuple(RouteSpec.model_fields),
}
