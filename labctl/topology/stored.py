"""A lab.json read back: checked value by value as the topology's model checks it.

lab.json is a file of the lab's state directory: data, never authority (docs/reliability.md,
"Trust boundaries"). Its values reach ssh's argv (node names), qemu's argv (images, MACs,
mount paths), the network namespace (interface names, MTUs) and the node's shell (routes,
packages), so a lab read back must satisfy the same rules a topology file does: the
model's patterns and ranges, the workbench's package and mount checks. Anything else is
a ValueError, which the lab directory reports as a corrupt lab.json.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from labctl.capabilities import ACCELS, either, providers
from labctl.errors import short_repr
from labctl.topology.host import FLAG, allowed, refusal
from labctl.topology.kernelsource import MAX_KERNEL_PATH
from labctl.topology.model import (
    ENDPOINT_RE,
    ENGINE_RE,
    HOST_NAME_RE,
    IFNAME_RE,
    IMAGE_RE,
    LAB_NAME_RE,
    LINK_NAME_RE,
    MAX_NODES,
    NODE_NAME_RE,
    RDMA_TYPES,
)
from labctl.topology.resolved import Interface, Lab, Mount, Node, Route, Segment
from labctl.topology.workbench import (
    MAX_MOUNTS,
    MAX_PACKAGES,
    WorkbenchValueError,
    check_package,
    check_target,
)

MAC_RE = r"02(:[0-9a-f]{2}){5}"
MIRROR_RE = r"(https?|file)://[^\s\"'\\]+"
MAX_SEGMENTS = 4096
MAX_INTERFACES = 99  # eth1..eth99


def _fail(where: str, value: object, what: str) -> ValueError:
    return ValueError(f"{where}: {short_repr(value)} is not {what}")


def _match(where: str, value: object, pattern: str, what: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(pattern, value):
        raise _fail(where, value, what)
    return value


def _int(where: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _fail(where, value, f"an integer from {low} to {high}")
    return value


def _canonical(where: str, value: object, parse: Callable[[str], Any], what: str) -> str:
    """An address written as Python's ipaddress writes it (no leading zeros, no spaces)."""
    try:
        if isinstance(value, str) and str(parse(value)) == value:
            return value
    except ValueError:
        pass
    raise _fail(where, value, what)


def _workbench(where: str, check: Callable[[str], object], value: object) -> None:
    if not isinstance(value, str):
        raise _fail(where, value, "a string")
    try:
        check(value)
    except WorkbenchValueError as exc:
        raise ValueError(f"{where}: {exc.message}") from None


def _count(where: str, items: Iterable[object], most: int) -> None:
    if len(tuple(items)) > most:
        raise ValueError(f"{where}: more than {most}")


def _check_interface(where: str, iface: Interface, segments: int) -> None:
    _match(f"{where}.name", iface.name, IFNAME_RE, "an interface name")
    _int(f"{where}.segment", iface.segment, 0, segments - 1)
    _match(f"{where}.mac", iface.mac, MAC_RE, "a lab MAC address")
    _canonical(f"{where}.ipv4", iface.ipv4, ipaddress.IPv4Interface,
               "an IPv4 address with its prefix")
    _int(f"{where}.mtu", iface.mtu, 576, 9000)


def _check_mount(where: str, mount: Mount, allowances: tuple[Path, ...]) -> None:
    source = mount.source
    if (not isinstance(source, str) or not source.startswith("/")
            or any(ch in source for ch in "\0\n\r")):
        raise _fail(f"{where}.source", source, "an absolute host path")
    # The rule `up` applies to a topology's mounts (host.refusal), to where the source
    # leads now; the opt-in is the one the user gave `up` on its command line, which labctl
    # keeps outside the lab directory (LabDir.allowances), never a value of lab.json.
    resolved = Path(os.path.realpath(source))
    why = refusal(resolved)
    if why is not None and not allowed(resolved, allowances):
        raise ValueError(f"{where}.source: {short_repr(source)} is {why}, and `labctl up` "
                         f"was not given {FLAG} for it")
    _workbench(f"{where}.target", check_target, mount.target)
    if not isinstance(mount.readonly, bool):
        raise _fail(f"{where}.readonly", mount.readonly, "true or false")


def _check_route(where: str, route: Route) -> None:
    _canonical(f"{where}.to", route.to, ipaddress.IPv4Network, "an IPv4 network")
    _canonical(f"{where}.via", route.via, ipaddress.IPv4Address, "an IPv4 address")


def _check_node(where: str, node: Node, segments: int, allowances: tuple[Path, ...]) -> None:
    _match(f"{where}.name", node.name, NODE_NAME_RE, "a node name")
    _int(f"{where}.index", node.index, 1, MAX_NODES)
    if node.rdma not in RDMA_TYPES:
        raise _fail(f"{where}.rdma", node.rdma, "rxe, siw or none")
    _int(f"{where}.memory_mib", node.memory_mib, 128, 65536)
    _int(f"{where}.cpus", node.cpus, 1, 64)
    _match(f"{where}.image", node.image, IMAGE_RE, "an image name")
    if not isinstance(node.router, bool):
        raise _fail(f"{where}.router", node.router, "true or false")
    _count(f"{where}.interfaces", node.interfaces, MAX_INTERFACES)
    for i, iface in enumerate(node.interfaces):
        _check_interface(f"{where}.interfaces[{i}]", iface, segments)
    _count(f"{where}.packages", node.packages, MAX_PACKAGES)
    for i, package in enumerate(node.packages):
        _workbench(f"{where}.packages[{i}]", check_package, package)
    _count(f"{where}.mounts", node.mounts, MAX_MOUNTS)
    for i, mount in enumerate(node.mounts):
        _check_mount(f"{where}.mounts[{i}]", mount, allowances)
    for i, route in enumerate(node.routes):
        _check_route(f"{where}.routes[{i}]", route)
    if node.kernel != "image" and (
            not isinstance(node.kernel, str) or not node.kernel.startswith("/")
            or len(node.kernel) > MAX_KERNEL_PATH
            or any(ch in node.kernel for ch in "\0\n\r")):
        raise _fail(f"{where}.kernel", node.kernel, "image or an absolute host path")
    names = {iface.name for iface in node.interfaces}
    for name in node.rdma_ifnames:
        if name not in names:
            raise _fail(f"{where}.rdma_ifnames", name, "one of the node's interfaces")


def _check_segment(where: str, segment: Segment, index: int) -> None:
    if segment.index != index:
        raise _fail(f"{where}.index", segment.index, f"{index} (its place in the list)")
    _match(f"{where}.name", segment.name, LINK_NAME_RE, "a link name")
    if segment.kind not in ("p2p", "switch"):
        raise _fail(f"{where}.kind", segment.kind, "p2p or switch")
    _canonical(f"{where}.subnet", segment.subnet, ipaddress.IPv4Network, "an IPv4 network")
    _int(f"{where}.mtu", segment.mtu, 576, 9000)
    for endpoint in segment.endpoints:
        _match(f"{where}.endpoints", endpoint, ENDPOINT_RE, "NODE:ethN")


def _check_options(options: dict[str, Any]) -> None:
    """provider_options: what `up` put there (accel, mirror, engine) and a multi-host
    lab's hosts and placement; each reaches an argv or an engine connection."""
    checks: dict[str, Callable[[Any], bool]] = {
        "accel": lambda v: v in ACCELS,
        "boot": lambda v: v == "restore",
        "mirror": lambda v: isinstance(v, str) and re.fullmatch(MIRROR_RE, v) is not None,
        "engine": lambda v: isinstance(v, str) and re.fullmatch(ENGINE_RE, v) is not None,
        "hosts": lambda v: isinstance(v, dict) and all(
            re.fullmatch(HOST_NAME_RE, str(k)) and isinstance(e, str)
            and re.fullmatch(ENGINE_RE, e) for k, e in v.items()),
        "placement": lambda v: isinstance(v, dict) and all(
            re.fullmatch(NODE_NAME_RE, str(k)) and isinstance(h, str)
            and re.fullmatch(HOST_NAME_RE, h) for k, h in v.items()),
    }
    for key, value in options.items():
        check = checks.get(key)
        if check is None or not check(value):
            raise _fail(f"provider_options.{key}", value, "a value labctl writes there")


def check_stored_lab(lab: Lab, allowances: tuple[Path, ...] = ()) -> Lab:
    """`lab` if every value is one a topology could have given (with `allowances`, the
    --allow-host-mount folders its `up` was given); else ValueError."""
    _match("name", lab.name, LAB_NAME_RE, "a lab name")
    if lab.provider not in providers():
        raise _fail("provider", lab.provider, either(providers()))
    if not isinstance(lab.source, str):
        raise _fail("source", lab.source, "a path")
    if not isinstance(lab.provider_options, dict):
        raise _fail("provider_options", lab.provider_options, "an object")
    _check_options(lab.provider_options)
    _count("segments", lab.segments, MAX_SEGMENTS)
    for i, segment in enumerate(lab.segments):
        _check_segment(f"segments[{i}]", segment, i)
    _count("nodes", lab.nodes, MAX_NODES)
    if not lab.nodes:  # as a topology: at least one node (commands index the first)
        raise ValueError("nodes: none")
    for i, node in enumerate(lab.nodes):
        _check_node(f"nodes[{i}]", node, len(lab.segments), allowances)
    names = [node.name for node in lab.nodes]
    if len(set(names)) != len(names):
        raise ValueError("nodes: a node name is used twice")
    return lab
