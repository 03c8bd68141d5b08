"""What every kind of node gets from labctl, whatever runs it: its settings (node.env)
and the node-side code. One definition, so VM, container and Vagrant nodes agree."""

from __future__ import annotations

import hashlib
import shlex
from pathlib import Path

import labctl
from labctl.topology.resolved import Lab, Node

# Node-side code shipped to every node (stdlib + pyverbs only), under NODE_CODE
# (labctl/nodeside/__init__.py).
NODE_PACKAGES = ("nodeside", "verbs")


def rdma_device_name(node: Node, index: int = 0) -> str:
    """The node's index-th RDMA device (rxe0 on its first RDMA interface, rxe1...)."""
    return f"{node.rdma}{index}"


def mgmt_mac(lab: str, node: Node) -> str:
    digest = hashlib.sha256(lab.encode()).digest()
    return f"02:{digest[0]:02x}:{digest[1]:02x}:{digest[2]:02x}:{node.index:02x}:00"


def node_env(lab: Lab, node: Node) -> dict[str, str]:
    iface = node.rdma_interface
    env = {
        "LABCTL_LAB": lab.name,
        "LABCTL_NODE": node.name,
        "LABCTL_RDMA": node.rdma,
        "LABCTL_RDMA_DEV": rdma_device_name(node) if iface else "",
        "LABCTL_RDMA_NETDEV": iface.name if iface else "",
        "LABCTL_MGMT_MAC": mgmt_mac(lab.name, node),
        "LABCTL_IFACES": " ".join(f"{i.name},{i.mac},{i.ipv4},{i.mtu}" for i in node.interfaces),
    }
    # Only in routed labs, so that every other node's settings stay as they were.
    if node.router:
        env["LABCTL_ROUTER"] = "1"
    if node.routes:
        env["LABCTL_ROUTES"] = " ".join(f"{r.to},{r.via}" for r in node.routes)
    extra = node.rdma_interfaces[1:]
    if extra:  # several devices (qemu nodes): "rxe1,eth2 rxe2,eth3"
        env["LABCTL_RDMA_EXTRA"] = " ".join(
            f"{rdma_device_name(node, k)},{i.name}" for k, i in enumerate(extra, start=1))
    return env


def env_file(env: dict[str, str]) -> bytes:
    """node.env: KEY=value lines the init script sources (values quoted for the shell)."""
    return "".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items()).encode()


def node_code_files() -> list[tuple[str, Path]]:
    """(path under NODE_CODE, source file) of the node-side code, sorted."""
    package = Path(labctl.__file__).parent
    files = [("labctl/__init__.py", package / "__init__.py")]
    for sub in NODE_PACKAGES:
        for path in sorted((package / sub).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files.append((f"labctl/{path.relative_to(package)}", path))
    return files
