"""A lab's network namespace, its bridges (one per segment) and the nodes' taps.

Everything of a lab's data plane lives inside the namespace `labctl-<lab>`: deleting the
namespace removes every bridge and tap in it, so teardown is exact and cannot touch the
host's own interfaces.
"""

from __future__ import annotations

import fcntl
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager

from pyroute2 import IPRoute, netns

from labctl.errors import LabctlError

NETNS_PREFIX = "labctl-"
_TUNSETIFF = 0x400454CA
_IFF_TAP = 0x0002
_IFF_NO_PI = 0x1000


def netns_name(lab: str) -> str:
    return f"{NETNS_PREFIX}{lab}"


def bridge_name(segment_index: int) -> str:
    return f"br{segment_index}"


def tap_name(node_index: int, ifname: str) -> str:
    return f"t{node_index}-{ifname}"[:15]


def lab_namespaces() -> list[str]:
    return sorted(n for n in netns.listnetns() if n.startswith(NETNS_PREFIX))


def create_netns(name: str) -> None:
    if name in netns.listnetns():
        raise LabctlError(
            f"network namespace {name} already exists",
            hint="a lab of this name is up or was not removed: run `labctl down` for it",
        )
    netns.create(name)
    with IPRoute(netns=name) as ipr:
        (lo,) = ipr.link_lookup(ifname="lo")
        ipr.link("set", index=lo, state="up")


def delete_netns(name: str) -> bool:
    """Remove the namespace (and with it every bridge and tap in it). True if it existed."""
    if name not in netns.listnetns():
        return False
    netns.remove(name)
    return True


def add_bridge(ns: str, name: str, mtu: int) -> None:
    with IPRoute(netns=ns) as ipr:
        # No STP and no forwarding delay: links work as soon as they exist.
        # No multicast snooping: RoCE multicast (mckey) must reach every port.
        ipr.link(
            "add",
            ifname=name,
            kind="bridge",
            br_stp_state=0,
            br_forward_delay=0,
            br_mcast_snooping=0,
        )
        (index,) = ipr.link_lookup(ifname=name)
        ipr.link("set", index=index, mtu=mtu, state="up")


@contextmanager
def _inside(ns: str) -> Iterator[None]:
    netns.pushns(ns)
    try:
        yield
    finally:
        netns.popns()


def open_tap(ns: str, name: str, bridge: str, mtu: int) -> int:
    """Create tap `name` inside `ns`, attached to `bridge`; return its fd for qemu.

    The tap lives as long as an fd to it is open, so it disappears with its qemu process.
    """
    with _inside(ns):
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TAP | _IFF_NO_PI))
        except OSError as exc:
            os.close(fd)
            raise LabctlError(
                f"cannot create tap {name} in {ns}: {exc}",
                hint="labctl needs root and /dev/net/tun",
            ) from exc
    with IPRoute(netns=ns) as ipr:
        (index,) = ipr.link_lookup(ifname=name)
        (master,) = ipr.link_lookup(ifname=bridge)
        ipr.link("set", index=index, master=master, mtu=mtu, state="up")
    return fd


def links_in(ns: str) -> list[str]:
    with IPRoute(netns=ns) as ipr:
        return sorted(link.get("ifname") for link in ipr.get_links())
