"""The resolved lab: what providers build. Plain dataclasses, JSON round-trippable.

A Lab is the topology after validation and augmentation (defaults applied, addresses
and MACs assigned). It is saved in the lab directory so `down` and `status` work even
when the topology file is gone.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from labctl import bounded, capabilities

Rdma = Literal["rxe", "siw", "none"]


class _Registered:
    """A provider's name as pydantic sees it: one of labctl/capabilities.py's registry when
    validated (else the error a Literal of those names gives, which problems.py words), and
    those names in the JSON Schemas (labctl/cli/schemas.py, the topology's schema)."""

    def __get_pydantic_core_schema__(self, source: Any,
                                     handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_plain_validator_function(_registered_provider)

    def __get_pydantic_json_schema__(self, schema: CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {"type": "string", "enum": list(capabilities.providers())}


def _registered_provider(value: Any) -> str:
    names = capabilities.providers()
    if isinstance(value, str) and value in names:
        return value
    expected = capabilities.either([repr(n) for n in names])
    raise PydanticCustomError("literal_error", "Input should be {expected}",
                              {"expected": expected})


# A str to mypy (`up --provider` and `down` put names in that the topology checks), one of
# the registered providers to pydantic: the topology's `provider:` and the JSON Schemas.
ProviderName = Annotated[str, _Registered()]


@dataclass(frozen=True)
class Interface:
    name: str  # inside the node, e.g. "eth1"
    segment: int  # index into Lab.segments
    mac: str  # "02:xx:xx:xx:xx:xx", unique in the lab
    ipv4: str  # "10.77.1.1/24"
    mtu: int

    @property
    def address(self) -> str:
        return self.ipv4.split("/")[0]


@dataclass(frozen=True)
class Mount:
    """A host folder in a node."""

    source: str  # absolute path on the host
    target: str  # absolute path in the node
    readonly: bool = False

    @property
    def text(self) -> str:
        return f"{self.source}:{self.target}" + (":ro" if self.readonly else "")


@dataclass(frozen=True)
class Route:
    to: str  # "10.77.2.0/24"
    via: str  # the gateway, on one of the node's segments: "10.77.1.1"


@dataclass(frozen=True)
class Node:
    # Keys lab.json (and `validate --json`) leave out when empty: the files of labs
    # without them stay as they were.
    OMITTED_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ("packages", "mounts")
    # Likewise, keys left out at their default value.
    OMITTED_AT_DEFAULT: ClassVar[dict[str, str]] = {"kernel": "image"}

    name: str
    index: int  # 1-based, stable order of the topology file
    rdma: Rdma
    memory_mib: int
    cpus: int
    image: str
    interfaces: tuple[Interface, ...]
    packages: tuple[str, ...] = ()  # added to the node's image (sorted, unique)
    mounts: tuple[Mount, ...] = ()
    router: bool = False  # forwards IPv4 between its segments
    routes: tuple[Route, ...] = ()  # explicit and computed, by destination
    # Interfaces with an RDMA device each, the first device's first ("eth1", "eth2"); empty:
    # the first data interface only (as every lab written before this key).
    rdma_ifnames: tuple[str, ...] = ()
    # The kernel it boots: "image" (the image's own) or an absolute host path (a kernel
    # build tree, or a folder laid out as `make modules_install` leaves it)
    kernel: str = "image"

    @property
    def kernel_path(self) -> str | None:
        """The host path of the kernel it boots; None: the image's own."""
        return None if self.kernel == "image" else self.kernel

    @property
    def rdma_interfaces(self) -> tuple[Interface, ...]:
        """The data interfaces with an RDMA device, in device order (rxe0, rxe1, ...)."""
        if self.rdma == "none" or not self.interfaces:
            return ()
        if not self.rdma_ifnames:
            return self.interfaces[:1]
        by_name = {i.name: i for i in self.interfaces}
        return tuple(by_name[name] for name in self.rdma_ifnames)

    @property
    def rdma_interface(self) -> Interface | None:
        """The data interface of the node's first RDMA device."""
        found = self.rdma_interfaces
        return found[0] if found else None

    def device_index(self, iface: Interface) -> int:
        """k for the k-th RDMA device (rxe0, rxe1...): the one on `iface`."""
        return [i.name for i in self.rdma_interfaces].index(iface.name)


@dataclass(frozen=True)
class Segment:
    index: int  # 0-based
    name: str  # "link1" or the user's name
    kind: Literal["p2p", "switch"]  # p2p: two endpoints; switch: more
    subnet: str  # "10.77.1.0/24"
    mtu: int
    endpoints: tuple[str, ...]  # "node:ifname"


@dataclass(frozen=True)
class Lab:
    name: str
    provider: ProviderName
    source: str  # path of the topology file it came from
    nodes: tuple[Node, ...]
    segments: tuple[Segment, ...]
    provider_options: dict[str, Any] = field(default_factory=dict)

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        for node in data["nodes"]:  # the workbench keys only where used
            for key in Node.OMITTED_WHEN_EMPTY:
                if not node[key]:
                    del node[key]
            for key, default in Node.OMITTED_AT_DEFAULT.items():
                if node[key] == default:
                    del node[key]
        return json.dumps(data, indent=2, sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> Lab:
        """The lab in `text`; ValueError (bounded.BoundedError among them), TypeError or
        KeyError if it is not one. Values are checked by labctl.topology.stored."""
        raw = bounded.load_object(text)
        nodes = tuple(
            Node(**{**n, "interfaces": tuple(Interface(**i) for i in n["interfaces"]),
                    "packages": tuple(n.get("packages", ())),
                    "mounts": tuple(Mount(**m) for m in n.get("mounts", ())),
                    "routes": tuple(Route(**r) for r in n.get("routes", ())),
                    "rdma_ifnames": tuple(n.get("rdma_ifnames", ()))})
            for n in raw["nodes"]
        )
        segments = tuple(
            Segment(**{**s, "endpoints": tuple(s["endpoints"])}) for s in raw["segments"]
        )
        return cls(
            name=raw["name"],
            provider=raw["provider"],
            source=raw["source"],
            nodes=nodes,
            segments=segments,
            provider_options=raw.get("provider_options", {}),
        )
