"""Where to capture: a node's data interface seen from the lab's own side of the link."""

from __future__ import annotations

from dataclasses import dataclass

from labctl.capabilities import offering
from labctl.errors import LabctlError, UsageError
from labctl.lab.handle import LabHandle
from labctl.net.labnet import has_link, namespace_exists
from labctl.providers.base import HOST, VM, HostLink


@dataclass(frozen=True)
class CaptureTarget:
    node: str
    ifname: str  # inside the node, e.g. eth1
    netns: str  # the lab's namespace
    device: str  # the lab-side end of the node's interface there: a tap or a veth
    engine: str = HOST  # where that namespace lives: this host, or the Docker host VM

    @property
    def where(self) -> str:
        text = f"{self.device} in {self.netns}"
        return text + " in the Docker host VM" if self.engine == VM else text


def resolve(handle: LabHandle, node: str, ifname: str) -> CaptureTarget:
    """The lab-side end of NODE:IF as its provider places it (Provider.host_link), checked
    to be there. Refuses the labs whose links are not labctl's (vagrant, multi-host
    docker)."""
    provider = handle.provider
    if not provider.capabilities.capture:
        raise provider.refuse_links(
            "capture",
            hint=f"capture inside the node (`labctl exec --lab {handle.lab.name} {node} -- "
                 f"tcpdump -i {ifname} -c 100`), or use a "
                 f"{' or '.join(offering('capture'))} lab",
        )
    link = provider.host_link(handle.labdir.load_state(), node, ifname)
    if link.engine == VM:
        _check_in_docker_host_vm(handle, node, ifname, link)
    else:
        _check_on_this_host(handle, node, ifname, link)
    return CaptureTarget(node, ifname, link.netns, link.device, link.engine)


def _check_on_this_host(handle: LabHandle, node: str, ifname: str, link: HostLink) -> None:
    ns, device = link.netns, link.device
    # Look before opening: opening a missing namespace would create it.
    if not namespace_exists(ns):
        raise LabctlError(f"lab {handle.lab.name} has no network namespace {ns}",
                          hint="is the lab up? see `labctl status`")
    try:
        present = has_link(ns, device)
    except OSError as exc:
        raise LabctlError(f"cannot open the lab's namespace {ns}: {exc}",
                          hint="capture needs root; is the lab up (`labctl status`)?") from exc
    if not present:
        raise LabctlError(f"{node}:{ifname} has no {link.kind} {device} in {ns}",
                          hint=f"is {node} running? see `labctl status`")


def _check_in_docker_host_vm(handle: LabHandle, node: str, ifname: str,
                             link: HostLink) -> None:
    """The lab's netns and the node's link end in the Docker host VM, asked of the network
    helper there (labctl/engineside/dockernet.py)."""
    from labctl.dockerhost.engine import Engine
    from labctl.dockerhost.vm import DockerHostVM

    ns, device = link.netns, link.device
    vm = DockerHostVM()
    if not vm.running():
        raise LabctlError("the Docker host VM is not running, so neither is the lab",
                          hint=f"`labctl up` the lab again, or `labctl down --lab "
                               f"{handle.lab.name}`")
    found = Engine(VM, vm.base_url).helper("show", ns, timeout=60)
    if ns not in found.get("netns", []):
        raise LabctlError(f"lab {handle.lab.name} has no network namespace {ns} in the "
                          "Docker host VM", hint="is the lab up? see `labctl status`")
    if device not in found.get("links", []):
        raise LabctlError(f"{node}:{ifname} has no {link.kind} {device} in {ns} in the "
                          "Docker host VM", hint=f"is {node} running? see `labctl status`")


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


def compiled_filter(bpf: str) -> str:
    """The BPF program of `bpf` for Ethernet, as vmcapture.py takes it: 'N,CODE JT JF K,...'
    (`tcpdump -ddd` on one line). Compiled here, where libpcap is, for a capture in the VM."""
    from scapy.arch.common import compile_filter
    from scapy.data import DLT_EN10MB

    program = compile_filter(bpf, linktype=DLT_EN10MB)
    insns = [program.bf_insns[i] for i in range(program.bf_len)]
    return ",".join([str(len(insns)), *(f"{i.code} {i.jt} {i.jf} {i.k & 0xFFFFFFFF}"
                                          for i in insns)])
