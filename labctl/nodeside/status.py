"""Print this node's RDMA and data-interface state as JSON (runs inside a node).

Reads sysfs (no pyverbs import: it costs seconds under emulation) and asks the C
`ibv_devinfo` only for the active MTU, which sysfs does not expose.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys

IB = "/sys/class/infiniband"


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def roce_v2_ipv4_gid_index(dev: str, port: int = 1) -> tuple[int | None, str]:
    """Index and address of the first RoCE v2 GID that maps an IPv4 address."""
    base = f"{IB}/{dev}/ports/{port}"
    gids = (
        sorted(int(n) for n in os.listdir(f"{base}/gids")) if os.path.isdir(f"{base}/gids") else []
    )
    for index in gids:
        gid = _read(f"{base}/gids/{index}")
        if not gid or gid.replace("0", "").replace(":", "") == "":
            continue
        if _read(f"{base}/gid_attrs/types/{index}") != "RoCE v2":
            continue
        address = ipaddress.IPv6Address(gid)
        if address.ipv4_mapped:
            return index, str(address.ipv4_mapped)
    return None, ""


def active_mtu(dev: str, port: int = 1) -> str:
    try:
        out = subprocess.run(
            ["ibv_devinfo", "-d", dev, "-i", str(port)], capture_output=True, text=True, timeout=20
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    for line in out.splitlines():
        if line.strip().startswith("active_mtu:"):
            return line.split(":", 1)[1].strip().split()[0]
    return ""


def device_record(dev: str) -> dict[str, object]:
    port = f"{IB}/{dev}/ports/1"
    netdevs = (
        os.listdir(f"{port}/gid_attrs/ndevs") if os.path.isdir(f"{port}/gid_attrs/ndevs") else []
    )
    gid_index, gid_ipv4 = roce_v2_ipv4_gid_index(dev)
    netdev = _read(f"{port}/gid_attrs/ndevs/0") if "0" in netdevs else ""
    return {
        "name": dev,
        "node_type": _read(f"{IB}/{dev}/node_type"),
        "netdev": netdev,
        "port_state": _read(f"{port}/state").split(": ")[-1],
        "link_layer": _read(f"{port}/link_layer"),
        "active_mtu": active_mtu(dev),
        "gid_index": gid_index,
        "gid_ipv4": gid_ipv4,
    }


def interfaces() -> list[dict[str, object]]:
    out = subprocess.run(["ip", "-j", "addr", "show"], capture_output=True, text=True).stdout
    result = []
    for link in json.loads(out or "[]"):
        if link.get("ifname") in ("lo", "eth0"):
            continue
        result.append(
            {
                "name": link.get("ifname"),
                "state": link.get("operstate"),
                "mtu": link.get("mtu"),
                "mac": link.get("address"),
                "ipv4": [
                    f"{a['local']}/{a['prefixlen']}"
                    for a in link.get("addr_info", [])
                    if a.get("family") == "inet"
                ],
            }
        )
    return result


def main() -> int:
    devices = sorted(os.listdir(IB)) if os.path.isdir(IB) else []
    # Container nodes share one kernel and see every lab's devices: report our own.
    own = os.environ.get("LABCTL_RDMA_DEV")
    if own and own in devices:
        devices = [own]
    json.dump(
        {"devices": [device_record(d) for d in devices], "interfaces": interfaces(),
         "kernel": os.uname().release}, sys.stdout
    )
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
