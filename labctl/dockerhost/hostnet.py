"""The Docker hosts' network: one bridge in a labctl-made netns joining the named VMs.

Named Docker host VMs (`labctl docker-host up --name N`) get a second NIC (eth1) on this
bridge, so a swarm across them (its control traffic on 2377/tcp and 7946/tcp+udp, its
VXLAN data on 4789/udp) travels only inside the namespace `labctl-docker_hosts` (an
underscore: no lab can have that name) and the VMs. Nothing reaches the host's own
interfaces. The netns is made by the first named VM and deleted with the last one.

Each VM has an index K (the smallest free one, recorded in its directory): tap tK-eth1,
address 10.250.0.K/24, a MAC derived from K. The MTU is jumbo: VXLAN adds 50 bytes to
every frame of an overlay network, so with 9100 here any lab segment MTU up to 9000 fits
unfragmented and rxe reports the same active MTU as on one host.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from labctl import bounded, safefs
from labctl.errors import LabctlError
from labctl.locks import blocking_lock
from labctl.net import labnet
from labctl.paths import docker_hosts_root

NETNS = "labctl-docker_hosts"
BRIDGE = "br0"
SUBNET = ipaddress.IPv4Network("10.250.0.0/24")
MTU = 9100
INDEX_FILE = "hostnet-index"
MAX_INDEX = 200


def lock_path() -> Path:
    return docker_hosts_root() / "docker-hosts-net.lock"


def address(index: int) -> str:
    return str(SUBNET.network_address + index)


def cidr(index: int) -> str:
    return f"{address(index)}/{SUBNET.prefixlen}"


def mac(index: int) -> str:
    # Locally administered, distinct from lab MACs (02:...) and management MACs.
    return f"0a:4c:48:00:00:{index:02x}"


def tap(index: int) -> str:
    return labnet.tap_name(index, "eth1")


def recorded_index(vm_path: Path) -> int:
    """The VM's index, 0 when it has none. The file is data: read through no link, bounded,
    and only a number in 1..MAX_INDEX counts (it names a tap and an address)."""
    try:
        text = safefs.read_bytes(vm_path / INDEX_FILE, docker_hosts_root(), 16)
        return bounded.parse_int(text, "a Docker host VM's index", low=1, high=MAX_INDEX)
    except (OSError, LabctlError):  # missing, a link, too long, not a number: none
        return 0


def _owner() -> str:
    """The hosts' netns is global, the VMs' directories (and their indexes) per state dir:
    the netns carries the state dir it serves, as a lab's does."""
    return labnet.owner_mark(docker_hosts_root())


def _vm_paths() -> list[Path]:
    root = docker_hosts_root()
    if not root.is_dir():
        return []
    return [p for p in root.iterdir() if p.is_dir() and p.name.startswith("docker-host-")]


def attach(vm_path: Path) -> int:
    """Make sure the netns and its bridge exist; give the VM at `vm_path` an index."""
    owner = _owner()
    with blocking_lock(lock_path()):
        if not labnet.namespace_exists(NETNS):
            labnet.create_netns(NETNS, owner)
            labnet.add_bridge(NETNS, BRIDGE, MTU)
        elif labnet.netns_owner(NETNS) not in (None, owner):
            raise LabctlError(
                f"the Docker hosts' network ({NETNS}) serves the named VMs of another "
                f"state directory (LABCTL_STATE_DIR); their indexes would collide",
                hint="run named Docker host VMs from one state directory at a time: "
                     "`labctl docker-host down --name N` there first")
        index = recorded_index(vm_path)
        if index:
            return index
        used = {recorded_index(p) for p in _vm_paths()}
        free = [i for i in range(1, MAX_INDEX + 1) if i not in used]
        if not free:
            raise LabctlError(f"{MAX_INDEX} Docker host VMs already have an address",
                              hint="`labctl docker-host down --name N` for some")
        safefs.write_bytes(vm_path / INDEX_FILE, f"{free[0]}\n".encode(), docker_hosts_root())
        return free[0]


def release() -> list[str]:
    """Delete the netns once no named VM has a directory left (call after removing one)."""
    with blocking_lock(lock_path()):
        if any(recorded_index(p) for p in _vm_paths()):
            return []
        return [f"netns {NETNS}"] if labnet.delete_netns(NETNS, _owner()) else []
