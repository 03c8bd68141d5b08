"""Where to capture: a node's data interface seen from the lab's own side of the link."""

from __future__ import annotations

from dataclasses import dataclass

from pyroute2 import IPRoute, netns

from labctl.errors import LabctlError, UsageError
from labctl.lab.handle import LabHandle
from labctl.net.labnet import netns_name, tap_name


@dataclass(frozen=True)
class CaptureTarget:
    node: str
    ifname: str  # inside the node, e.g. eth1
    netns: str  # the lab's namespace on the host
    device: str  # the tap in that namespace that carries the node's interface


def parse_endpoint(handle: LabHandle, endpoint: str) -> tuple[str, str]:
    """NODE:IF -> (node, ifname), checked against the lab's topology (exit 2 if wrong)."""
    node, sep, ifname = endpoint.partition(":")
    nodes = {n.name: n for n in handle.lab.nodes}
    if not sep or not node or not ifname:
        raise UsageError(f"bad endpoint {endpoint!r}", hint="write NODE:IF, e.g. node1:eth1")
    if node not in nodes:
        raise UsageError(f"lab {handle.lab.name} has no node {node!r}",
                         hint=f"nodes: {', '.join(nodes)}")
    names = sorted(i.name for i in nodes[node].interfaces)
    if ifname not in names:
        raise UsageError(f"node {node} has no data interface {ifname!r}",
                         hint=f"its data interfaces: {', '.join(names) or 'none'}")
    return node, ifname


def resolve(handle: LabHandle, node: str, ifname: str) -> CaptureTarget:
    """The tap of NODE:IF in the lab's namespace; refuses providers without one."""
    if handle.lab.provider != "qemu":
        raise UsageError(
            f"capture is not supported for {handle.lab.provider} labs yet",
            hint="their links live inside the Docker host VM (or the Vagrant VMs); run "
                 "`labctl exec NODE -- tcpdump` there, or use a qemu lab",
        )
    ns = netns_name(handle.lab.name)
    device = tap_name(handle.lab.node(node).index, ifname)
    # Look before opening: IPRoute(netns=...) would create a missing namespace.
    if ns not in netns.listnetns():
        raise LabctlError(f"lab {handle.lab.name} has no network namespace {ns}",
                          hint="is the lab up? see `labctl status`")
    try:
        with IPRoute(netns=ns) as ipr:
            present = bool(ipr.link_lookup(ifname=device))
    except OSError as exc:
        raise LabctlError(f"cannot open the lab's namespace {ns}: {exc}",
                          hint="capture needs root; is the lab up (`labctl status`)?") from exc
    if not present:
        raise LabctlError(f"{node}:{ifname} has no tap {device} in {ns}",
                          hint=f"is {node} running? see `labctl status`")
    return CaptureTarget(node, ifname, ns, device)


def check_filter(bpf: str | None) -> None:
    """Compile the BPF filter here (libpcap) so a typo is bad input, not a dead child."""
    if not bpf:
        return
    try:
        from scapy.arch.common import compile_filter
        from scapy.data import DLT_EN10MB
        from scapy.error import Scapy_Exception
    except ImportError as exc:  # pragma: no cover - scapy is a dependency
        raise LabctlError(f"scapy is missing: {exc}", hint="pip install scapy") from exc
    try:
        compile_filter(bpf, linktype=DLT_EN10MB)
    except ImportError as exc:
        raise LabctlError("cannot compile BPF filters: libpcap is not installed",
                          hint="apt-get install libpcap0.8 (scripts/setup.sh does)") from exc
    except Scapy_Exception as exc:
        raise UsageError(f"bad --filter {bpf!r}: {exc}",
                         hint="a tcpdump-style BPF expression, e.g. 'udp port 4791'") from exc
