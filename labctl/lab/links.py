"""What `labctl link show` reports of a lab's data links: each end's state, and netem.

A link end has two sides. The node's side is its interface as the node's kernel sees it
(`link set down` drops its carrier: qemu's set_link for VM nodes, the bridge-side veth for
containers) and its root qdisc: `link set --loss/--delay` puts netem there, in the node's
own kernel (the lab host's kernel may have no sch_netem). Both are read in the node
(`ip -j link show`, `tc -j qdisc show`), as untrusted replies. The host's side is the
lab's end of the cable as the provider places it (Provider.host_link: qemu's tap, docker's
veth on the lab's bridge), read with pyroute2 in the lab's netns when that netns is on this
host; the veths of a docker lab whose engine is the Docker host VM are not read from here.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, Literal, TypeVar

from pydantic import WithJsonSchema
from typing_extensions import TypedDict

from labctl import bounded
from labctl.capabilities import offering
from labctl.errors import LabctlError
from labctl.lab.handle import LabHandle
from labctl.net import labnet
from labctl.node.replies import read_reply
from labctl.nodeside.reply import shell_answer
from labctl.providers.base import HOST, HostLink

T = TypeVar("T")
NODE_SECONDS = 60.0  # past this a node counts as not answering
_IFF_UP = 0x1
_IFF_LOWER_UP = 0x10000  # carrier
# One command per node, one reply (nodeside/reply.py): {"links": `ip -j link show`,
# "qdiscs": `tc -j qdisc show`}.
_NODE_COMMAND = ["sh", "-c", shell_answer({"links": "ip -j link show",
                                          "qdiscs": "tc -j qdisc show"})]
_IN_THE_NODE = "`labctl exec NODE -- ip link show` and `tc qdisc show` in the node"


def check_provider(handle: LabHandle) -> None:
    """Refuse (exit 2) the labs whose links `link set` cannot change either."""
    if not handle.provider.capabilities.link_set:
        raise handle.provider.refuse_links("link show", hint=_IN_THE_NODE)


# A provider whose labs `link show` reads (capabilities.link_set), in the JSON Schema.
LinkProvider = Annotated[str, WithJsonSchema({"type": "string", "enum": offering("link_set")})]

EndState = Literal["up", "down", "absent"]  # an interface, in its node or on the host

class Netem(TypedDict):
    """A netem root qdisc's settings (None: not set)."""

    delay_ms: float | None
    jitter_ms: float | None
    loss_percent: float | None  # random loss
    rate_mbit: float | None


class LinkEnd(TypedDict):
    node: str
    interface: str  # eth1
    # The node's interface as its kernel sees it: up (admin up, carrier), down, absent
    # (no such interface in the node), ? (the node could not be asked: `reason` says why)
    node_state: EndState | Literal["?"]
    operstate: str  # as `ip` says: UP, DOWN, LOWERLAYERDOWN...; "" when not read
    qdisc: str  # the interface's root qdisc (netem, fq_codel...); "" when not read
    netem: Netem | None  # None: no netem on the interface
    reason: str  # why node_state is "?"; "" otherwise
    host_interface: str  # the tap (qemu) or veth (docker) on the lab's bridge
    host_state: EndState | None  # None: not on this host (docker)


class Link(TypedDict):
    segment: str
    kind: Literal["p2p", "switch"]
    subnet: str
    mtu: int
    ends: list[LinkEnd]


class LinkShowOutput(TypedDict):
    """`labctl link show --json`: the lab's data links."""

    lab: str
    provider: LinkProvider
    links: list[Link]


def host_states(netns: str, names: list[str]) -> dict[str, EndState] | None:
    """"up", "down" or "absent" for each interface of `netns`; None when the netns is not
    on this host (a docker lab's engine host, or a lab whose netns is gone)."""
    if not labnet.namespace_exists(netns):  # IPRoute(netns=) would create it
        return None
    from pyroute2 import IPRoute  # see labnet: 0.2 s to import, only where used

    states: dict[str, EndState] = {}
    with IPRoute(netns=netns) as ipr:
        for name in names:
            indexes = ipr.link_lookup(ifname=name)
            if not indexes:
                states[name] = "absent"
                continue
            flags = int(ipr.get_links(indexes[0])[0].get("flags", 0))
            carrier = _IFF_UP | _IFF_LOWER_UP  # a tap's operstate stays UNKNOWN: flags say
            states[name] = "up" if flags & carrier == carrier else "down"
    return states


def node_end(links: list[Any], ifname: str) -> tuple[EndState, str]:
    """(state, operstate) of `ifname` in a node's `ip -j link show`: "up" when it is
    administratively up with a carrier, "down" otherwise, "absent" when it has none."""
    for link in links:
        if isinstance(link, dict) and link.get("ifname") == ifname:
            flags = _field(link, "flags", list, [])
            operstate = _field(link, "operstate", str, "")
            up = "UP" in flags and "LOWER_UP" in flags and operstate in ("UP", "UNKNOWN")
            return ("up" if up else "down"), operstate[:20]
    return "absent", ""


def _field(record: dict[str, Any], key: str, kind: type[T], default: T) -> T:
    """record[key] when it is a `kind` (a node's reply may hold anything), else default."""
    value = record.get(key)
    return value if isinstance(value, kind) else default


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if bounded.finite(value) else None


def netem_of(qdiscs: list[Any], ifname: str) -> tuple[str, Netem | None]:
    """(root qdisc kind, netem settings or None) of `ifname` in `tc -j qdisc show`.

    tc's JSON: delay and jitter in seconds, loss a fraction, rate in bytes per second."""
    for qdisc in qdiscs:
        if not (isinstance(qdisc, dict) and qdisc.get("dev") == ifname and qdisc.get("root")):
            continue
        kind = _field(qdisc, "kind", str, "?")
        if kind != "netem":
            return kind[:20], None
        options = _field(qdisc, "options", dict, {})
        delay = _field(options, "delay", dict, {})
        loss = _field(options, "loss-random", dict, {})
        rate = _field(options, "rate", dict, {})
        return kind, {"delay_ms": _scaled(delay.get("delay"), 1000),
                      "jitter_ms": _scaled(delay.get("jitter"), 1000),
                      "loss_percent": _scaled(loss.get("loss"), 100),
                      "rate_mbit": _scaled(rate.get("rate"), 8 / 1e6)}
    return "", None


def _scaled(value: Any, factor: float) -> float | None:
    number = _number(value)
    return None if number is None else round(number * factor, 6)


def read_node(handle: LabHandle, node: str) -> tuple[list[Any], list[Any]]:
    """A node's (links, qdiscs), or LabctlError when it cannot be asked or answers with
    something that is not those two JSON lists."""
    result = handle.run(node, _NODE_COMMAND, timeout=NODE_SECONDS)
    hint = _IN_THE_NODE.replace("NODE", node)
    reply = read_reply(result, sender=node, doing="read the links of", hint=hint)
    links, qdiscs = (reply.get(key) if isinstance(reply, dict) else None
                     for key in ("links", "qdiscs"))
    if not isinstance(links, list) or not isinstance(qdiscs, list):
        raise LabctlError(f"{node} sent an unreadable reply (not two JSON lists)", hint=hint)
    return links, qdiscs


def _read_nodes(handle: LabHandle, nodes: list[str]) -> dict[str, Any]:
    def one(node: str) -> tuple[list[Any], list[Any]] | LabctlError:
        try:
            return read_node(handle, node)
        except LabctlError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
        return dict(zip(nodes, pool.map(one, nodes), strict=True))


def _end(endpoint: str, host: HostLink, reply: Any,
         hosts: dict[str, EndState] | None) -> LinkEnd:
    node_name, _, ifname = endpoint.partition(":")
    record: LinkEnd = {
        "node": node_name, "interface": ifname, "node_state": "?", "operstate": "",
        "qdisc": "", "netem": None, "reason": "", "host_interface": host.device,
        "host_state": None if hosts is None or host.engine != HOST else hosts[host.device],
    }
    if isinstance(reply, LabctlError):
        record["reason"] = reply.message
        return record
    links, qdiscs = reply
    record["node_state"], record["operstate"] = node_end(links, ifname)
    record["qdisc"], record["netem"] = netem_of(qdiscs, ifname)
    return record


def collect_links(handle: LabHandle) -> LinkShowOutput:
    """The lab's links with each end's state and netem."""
    check_provider(handle)
    lab = handle.lab
    state = handle.labdir.load_state()
    ends = {e: handle.provider.host_link(state, e.partition(":")[0], e.partition(":")[2])
            for s in lab.segments for e in s.endpoints}
    replies = _read_nodes(handle, [n.name for n in lab.nodes])
    on_this_host = [link for link in ends.values() if link.engine == HOST]
    hosts = host_states(on_this_host[0].netns, [link.device for link in on_this_host]) \
        if on_this_host else None
    return {
        "lab": lab.name,
        "provider": lab.provider,
        "links": [{"segment": s.name, "kind": s.kind, "subnet": s.subnet, "mtu": s.mtu,
                   "ends": [_end(e, ends[e], replies[e.partition(":")[0]], hosts)
                            for e in s.endpoints]}
                  for s in lab.segments],
    }

