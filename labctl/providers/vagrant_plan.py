"""What the Vagrantfile builds for a resolved lab, worked out here and nowhere else.

The Vagrantfile (labctl/data/Vagrantfile) keeps only Vagrant's plumbing: it defines the
machines, networks, synced folders and provisioning steps from this plan and derives no
address, MAC, network name, box or node setting itself. `labctl up` writes the plan into
the lab directory (LABDIR/vagrant-lab.json); a plain `vagrant up` gets the same document
from `labctl validate --json --vagrant TOPOLOGY`: the resolved lab of `validate --json`
with the plan added under "vagrant".

Settings of the host and of the user (LABCTL_VAGRANT_BOX, LABCTL_BOXES, LABCTL_BOX,
LABCTL_LIBVIRT_DRIVER, Vagrant's box directory) are read from the environment given, so
the plan is what the Vagrantfile used to work out when Vagrant evaluated it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from typing_extensions import TypedDict  # pydantic reads only this TypedDict on 3.11

from labctl.data.recipes import node_packages
from labctl.errors import UsageError
from labctl.node.env import node_code_files, node_env
from labctl.nodeside import NODE_CODE
from labctl.topology.resolved import Lab, Node

# Vagrant providers the Vagrantfile configures, and the plugin each needs (None: built in).
PLUGINS: dict[str, str | None] = {
    "libvirt": "vagrant-libvirt",
    "virtualbox": None,
    "vmware_desktop": "vagrant-vmware-desktop",
    "parallels": "vagrant-parallels",
}

# Public boxes by node image and Vagrant provider. trixie is the userland of labctl's qemu
# image (same RDMA libraries and tools, so the same inspector output). Debian's own
# debian/trixie64 is published for libvirt; for VirtualBox, VMware and Parallels (and arm64
# hosts) bento/debian-13 is used. LABCTL_VAGRANT_BOX overrides everything.
BOXES: dict[str, dict[str, str]] = {
    "trixie": {"libvirt": "debian/trixie64", "default": "bento/debian-13"},
    "bookworm": {"libvirt": "debian/bookworm64", "virtualbox": "debian/bookworm64",
                 "default": "bento/debian-12"},
}
LABCTL_BOX_PREFIX = "labctl/"  # `labctl image box` names its boxes labctl/IMAGE-KEY
HINT = "use provider qemu or docker"


class VagrantNetwork(TypedDict):
    name: str  # the libvirt network / VirtualBox internal network: labctl-LAB-LINK
    ifname: str
    mac: str
    ipv4: str
    mtu: int


class VagrantFolder(TypedDict):
    source: str  # host path (a `:ro` folder: labctl's read-only bind mount of it)
    target: str
    mode: Literal["rw", "ro"]


class VagrantNode(TypedDict):
    name: str
    rdma: Literal["rxe", "siw", "none"]
    memory_mib: int
    cpus: int
    boxes: dict[str, str]  # Vagrant provider ("default", "libvirt"...) -> box
    labctl_box: bool  # the libvirt box is labctl's own (`labctl image box`)
    vm_name: str
    mgmt_mac: str
    kernel_cmdline: str
    console_log: str | None  # None outside a lab directory (plain Vagrant)
    networks: list[VagrantNetwork]
    folders: list[VagrantFolder]
    node_env: dict[str, str]  # /etc/labctl/node.env


class VagrantCodeFile(TypedDict):
    path: str  # under node_code_dir
    source: str
    executable: bool


class VagrantMgmtNetwork(TypedDict):
    name: str
    address: str


class VagrantPlan(TypedDict):
    """What the Vagrantfile builds (plan())."""

    domain_prefix: str
    libvirt_driver: str
    mgmt_network: VagrantMgmtNetwork
    packages: list[str]
    node_code: list[VagrantCodeFile]
    node_code_dir: str
    node_init: str
    nodes: list[VagrantNode]


@dataclass(frozen=True)
class VagrantDocument(Lab):
    """`labctl validate --json --vagrant` and LABDIR/vagrant-lab.json: the resolved lab
    (`validate --json`) with the Vagrant plan added under "vagrant" (document())."""

    vagrant: VagrantPlan = field(kw_only=True)


def check_supported(lab: Lab) -> None:
    """What the Vagrantfile cannot build: routers and routes, several RDMA devices a node."""
    for node in lab.nodes:
        if node.router or node.routes:
            raise UsageError(f"nodes.{node.name}: routers and routes are not supported by "
                             "the Vagrantfile", hint=HINT)
        if len(node.rdma_interfaces) > 1:
            raise UsageError(f"nodes.{node.name}: several RDMA devices per node "
                             "(rdma_interfaces) are not supported by the Vagrantfile",
                             hint="use provider qemu")


def labctl_box(node: Node, env: Mapping[str, str]) -> str | None:
    """labctl's own box of the node's image (libvirt only), when Vagrant has it: the one
    labctl names for the node (LABCTL_BOXES, JSON node -> box; LABCTL_BOX, one for every
    node), else the newest labctl/IMAGE-* box in Vagrant's box directory."""
    per_node = env.get("LABCTL_BOXES") or "{}"
    try:
        boxes = json.loads(per_node)
    except ValueError:
        boxes = None
    if not isinstance(boxes, dict):
        raise UsageError(f"LABCTL_BOXES is not a JSON object: {per_node[:80]!r}",
                         hint='LABCTL_BOXES=\'{"node1": "labctl/trixie-KEY"}\', or unset it')
    if isinstance(boxes.get(node.name), str):
        return str(boxes[node.name])
    if env.get("LABCTL_BOX"):
        return env["LABCTL_BOX"]
    home = Path(env.get("VAGRANT_HOME") or Path(env.get("HOME") or Path.home()) / ".vagrant.d")
    found = [d for d in (home / "boxes").glob(f"labctl-VAGRANTSLASH-{node.image}-*")
             if (d / "0" / "libvirt").is_dir()]
    if not found:
        return None
    newest = max(found, key=lambda d: d.stat().st_mtime)
    return newest.name.replace("-VAGRANTSLASH-", "/", 1)


def box(node: Node, provider: str, env: Mapping[str, str]) -> str:
    """The box of `node` under Vagrant `provider` ("default": the one Vagrant evaluates for
    every provider before a provider block overrides it)."""
    if env.get("LABCTL_VAGRANT_BOX"):
        return env["LABCTL_VAGRANT_BOX"]
    # labctl's own images without a public box (trixie-dev, `packages:` lists) have only
    # labctl's box: also as the default box
    if provider == "libvirt" or node.image not in BOXES:
        local = labctl_box(node, env)
        if local is not None:
            return local
    if node.image not in BOXES:
        raise UsageError(f"node {node.name}: image {node.image!r} has no Vagrant box "
                         f"(known: {', '.join(BOXES)})", hint="set LABCTL_VAGRANT_BOX")
    boxes = BOXES[node.image]
    return boxes.get(provider, boxes["default"])


def libvirt_driver(env: Mapping[str, str]) -> str:
    """kvm, or qemu (TCG) where KVM is missing. labctl decides with a real probe and says so
    in LABCTL_LIBVIRT_DRIVER; plain Vagrant looks at /dev/kvm."""
    if env.get("LABCTL_LIBVIRT_DRIVER"):
        return env["LABCTL_LIBVIRT_DRIVER"]
    return "kvm" if os.access("/dev/kvm", os.R_OK | os.W_OK) else "qemu"


def mgmt_network(lab: str) -> VagrantMgmtNetwork:
    """The management network of a lab booted from labctl's box: a libvirt network of its
    own, isolated. Its /24 is picked from 192.168.130.0-249.0 by the lab name, so labs of
    different names rarely share one."""
    n = int.from_bytes(hashlib.sha256(lab.encode()).digest()[:2], "big") % 120
    return VagrantMgmtNetwork(name=f"labctl-{lab}-mgmt", address=f"192.168.{130 + n}.0/24")


def mgmt_mac(lab: str, node: Node) -> str:
    """A node's management MAC (52:54:00 is libvirt's prefix): the box's boot finds its
    management NIC by it (labctl.mgmt= on the kernel command line)."""
    digest = hashlib.sha256(f"{lab}/mgmt".encode()).digest()
    return f"52:54:00:{digest[0]:02x}:{digest[1]:02x}:{node.index:02x}"


def network_name(lab: str, segment: str) -> str:
    """A data link's network: a libvirt network, a VirtualBox internal network."""
    return f"labctl-{lab}-{segment}"


def folders(node: Node, labdir: Path | None) -> list[VagrantFolder]:
    """A node's host folders (`mounts:`, labctl's box only) as virtiofs synced folders. A
    `:ro` folder is shared through labctl's read-only bind mount of it (LABDIR/mounts/
    NODE-INDEX, labctl.providers.vagrant_mounts): Debian 12's virtiofsd has no read-only
    export. Without a lab directory (plain Vagrant) the node mounts the folder read-only."""
    result: list[VagrantFolder] = []
    for i, mount in enumerate(node.mounts):
        source = mount.source
        if mount.readonly and labdir is not None:
            source = str(labdir / "mounts" / f"{node.name}-{i}")
        result.append(VagrantFolder(source=source, target=mount.target,
                                    mode="ro" if mount.readonly else "rw"))
    return result


def node_plan(lab: Lab, node: Node, labdir: Path | None,
              env: Mapping[str, str]) -> VagrantNode:
    boxes = {provider: box(node, provider, env) for provider in ("default", *PLUGINS)}
    mac = mgmt_mac(lab.name, node)
    settings = node_env(lab, node)
    del settings["LABCTL_MGMT_MAC"]  # a qemu node's; Vagrant makes its own management NIC
    return VagrantNode(
        name=node.name,
        rdma=node.rdma,
        memory_mib=node.memory_mib,
        cpus=node.cpus,
        boxes=boxes,
        labctl_box=boxes["libvirt"].startswith(LABCTL_BOX_PREFIX),
        vm_name=f"labctl-{lab.name}-{node.name}",
        mgmt_mac=mac,
        kernel_cmdline=("console=ttyS0 quiet loglevel=3 panic=-1 "
                        f"labctl.node={node.name} labctl.mgmt={mac}"),
        console_log=str(labdir / f"console-{node.name}.log") if labdir else None,
        networks=[VagrantNetwork(name=network_name(lab.name, lab.segments[i.segment].name),
                                 ifname=i.name, mac=i.mac, ipv4=i.ipv4, mtu=i.mtu)
                  for i in node.interfaces],
        folders=folders(node, labdir),
        node_env=settings,
    )


def plan(lab: Lab, labdir: Path | None, env: Mapping[str, str]) -> VagrantPlan:
    """Everything the Vagrantfile needs for `lab`; `labdir` is the lab's directory when
    labctl runs Vagrant (console logs, read-only bind mounts), None for plain Vagrant."""
    check_supported(lab)
    code = node_code_files()
    return VagrantPlan(
        domain_prefix=f"labctl-{lab.name}_",
        libvirt_driver=libvirt_driver(env),
        mgmt_network=mgmt_network(lab.name),
        packages=list(node_packages()),
        node_code=[VagrantCodeFile(path=rel, source=str(path),
                                   executable=os.access(path, os.X_OK)) for rel, path in code],
        node_code_dir=NODE_CODE,
        node_init=str(dict(code)["labctl/nodeside/node-init.sh"]),
        nodes=[node_plan(lab, node, labdir, env) for node in lab.nodes],
    )


def document(lab: Lab, labdir: Path | None, env: Mapping[str, str]) -> str:
    """What the Vagrantfile reads: the resolved lab (`labctl validate --json`) with the
    plan under "vagrant" (`labctl validate --json --vagrant`)."""
    data = json.loads(lab.to_json())
    data["vagrant"] = plan(lab, labdir, env)
    return json.dumps(data, indent=2, sort_keys=True)
