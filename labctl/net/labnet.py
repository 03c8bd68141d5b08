"""A lab's network namespace, its bridges (one per segment) and the nodes' taps.

Everything of a lab's data plane lives inside the namespace `labctl-<lab>`: deleting the
namespace removes every bridge and tap in it, so teardown is exact and cannot touch the
host's own interfaces.

Namespace names are global, lab names only per state directory (LABCTL_STATE_DIR): two
state directories may each have a lab `x`. So a namespace carries its owner, a digest of
its lab directory's path (`owner_mark`), as the alias of its loopback interface, set when
it is made; `delete_netns(name, owner)` removes it only when that mark is the caller's
(or there is none: a namespace made by an older labctl).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING

from labctl.errors import LabctlError

if TYPE_CHECKING:
    from pyroute2 import IPRoute

NETNS_PREFIX = "labctl-"
_OWNER_PREFIX = "labctl-owner:"
_TUNSETIFF = 0x400454CA
_IFF_TAP = 0x0002
_IFF_NO_PI = 0x1000


# pyroute2 is imported where it is used: it costs about 0.2 s, a third of every labctl
# command's start (`python -X importtime -c 'import labctl.cli.app'`), and most commands
# never open a namespace.
def _netns() -> ModuleType:
    from pyroute2 import netns

    return netns


def _iproute(ns: str) -> IPRoute:
    from pyroute2 import IPRoute

    return IPRoute(netns=ns)


def netns_name(lab: str) -> str:
    return f"{NETNS_PREFIX}{lab}"


def owner_mark(lab_dir: str | os.PathLike[str]) -> str:
    """What a lab's namespace carries to say whose it is: its lab directory's path, as a
    digest (an interface alias holds 255 bytes; a path may be longer)."""
    digest = hashlib.sha256(os.fsencode(os.path.abspath(lab_dir))).hexdigest()[:32]
    return f"{_OWNER_PREFIX}{digest}"


def netns_owner(name: str) -> str | None:
    """The owner mark of namespace `name` (which must exist), None when it has none."""
    with _iproute(name) as ipr:
        found = ipr.link_lookup(ifname="lo")
        if not found:
            return None
        (link,) = ipr.get_links(found[0])
        alias = link.get_attr("IFLA_IFALIAS")
    return alias if isinstance(alias, str) and alias.startswith(_OWNER_PREFIX) else None


def bridge_name(segment_index: int) -> str:
    return f"br{segment_index}"


def tap_name(node_index: int, ifname: str) -> str:
    return f"t{node_index}-{ifname}"[:15]


def lab_namespaces() -> list[str]:
    return sorted(n for n in _netns().listnetns() if n.startswith(NETNS_PREFIX))


def namespace_exists(name: str) -> bool:
    return name in _netns().listnetns()


def has_link(ns: str, name: str) -> bool:
    """Whether `ns` has a link `name`; `ns` must exist (IPRoute would create it)."""
    with _iproute(ns) as ipr:
        return bool(ipr.link_lookup(ifname=name))


def create_netns(name: str, owner: str | None = None) -> None:
    if namespace_exists(name):
        raise LabctlError(
            f"network namespace {name} already exists",
            hint="a lab of this name is up or was not removed: run `labctl down` for it",
        )
    _netns().create(name)
    with _iproute(name) as ipr:
        (lo,) = ipr.link_lookup(ifname="lo")
        ipr.link("set", index=lo, state="up")
        if owner is not None:
            ipr.link("set", index=lo, ifalias=owner)


def delete_netns(name: str, owner: str | None = None) -> bool:
    """Remove the namespace (and with it every bridge and tap in it). True if it existed
    and was removed. With `owner`, a namespace whose mark names another owner (a lab of
    the same name in another state directory) is left alone: False."""
    if not namespace_exists(name):
        return False
    if owner is not None:
        found = netns_owner(name)
        if found is not None and found != owner:
            return False
    _netns().remove(name)
    return True


def add_bridge(ns: str, name: str, mtu: int) -> None:
    with _iproute(ns) as ipr:
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
    _netns().pushns(ns)
    try:
        yield
    finally:
        _netns().popns()


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
    with _iproute(ns) as ipr:
        (index,) = ipr.link_lookup(ifname=name)
        (master,) = ipr.link_lookup(ifname=bridge)
        ipr.link("set", index=index, master=master, mtu=mtu, state="up")
    return fd


def links_in(ns: str) -> list[str]:
    with _iproute(ns) as ipr:
        return sorted(link.get("ifname") for link in ipr.get_links())
