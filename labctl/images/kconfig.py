"""What a lab needs of a kernel's configuration, checked before anything boots.

A node on a kernel of the user's own needs the options below, built in (=y) or as modules
(=m): a kernel without one fails in the middle of a boot under emulation, minutes later
and with less to go on. `missing` lists each that a kernel's .config lacks, with the
`scripts/config` line that adds it; `labctl kernel config TREE` adds them all.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from labctl.topology.resolved import Node


@dataclass(frozen=True)
class Option:
    name: str  # without CONFIG_
    why: str  # what needs it, for the message
    tristate: bool = True  # can be a module (scripts/config --module), else --enable

    @property
    def fix(self) -> str:
        return f"scripts/config --{'module' if self.tristate else 'enable'} {self.name}"


# Every node: stage 1 mounts its disk, node-init.sh loads these at boot (builder.py's
# NODE_MODULES), the inspector opens /dev/infiniband/uverbs*.
BASE = (
    Option("DEVTMPFS", "stage 1 mounts /dev", tristate=False),
    Option("BLK_DEV_INITRD", "labctl boots the node from an initramfs", tristate=False),
    Option("VIRTIO_PCI", "the node's virtio devices"),
    Option("VIRTIO_BLK", "the node's root and modules disks"),
    Option("EXT4_FS", "the node's root and modules disks"),
    Option("VIRTIO_NET", "the node's network interfaces"),
    Option("SERIAL_8250_CONSOLE", "the node's console (ttyS0), where it says it is ready",
           tristate=False),
    Option("UNIX", "ssh and the inspector's helper"),
    Option("INET", "the lab's IPv4 network", tristate=False),
    Option("INFINIBAND", "RDMA devices"),
    Option("INFINIBAND_USER_ACCESS", "ibv_* programs and the inspector (/dev/infiniband)"),
    Option("INFINIBAND_ADDR_TRANS", "rdma_cm (rping, rdma_server, NVMe-oF)", tristate=False),
    # The rest of what node-init.sh loads at boot (a unit test holds the two together).
    Option("HW_RANDOM_VIRTIO", "virtio_rng: the host's entropy, or sshd waits for the CRNG"),
    Option("VIRTIO_BALLOON", "virtio_balloon: the node's free memory back to the host"),
    Option("INET_DIAG", "tcp_diag: `ss`, the runners' check that a server listens"),
    Option("INET_TCP_DIAG", "tcp_diag: `ss`, the runners' check that a server listens"),
    Option("BLK_DEV_LOOP", "loop devices (/dev/loop*), as on Debian"),
)
# The option that gives each module node-init.sh loads in a qemu node.
NODE_INIT_MODULES = {"virtio_rng": "HW_RANDOM_VIRTIO", "virtio_net": "VIRTIO_NET",
                     "virtio_balloon": "VIRTIO_BALLOON", "ib_uverbs": "INFINIBAND_USER_ACCESS",
                     "rdma_ucm": "INFINIBAND_USER_ACCESS", "tcp_diag": "INET_TCP_DIAG",
                     "loop": "BLK_DEV_LOOP"}
RXE = Option("RDMA_RXE", "rdma: rxe (Soft-RoCE)")
SIW = Option("RDMA_SIW", "rdma: siw (soft-iWARP)")
MOUNTS = (Option("NET_9P", "mounts: (host folders over virtio-9p)"),
          Option("NET_9P_VIRTIO", "mounts: (host folders over virtio-9p)"),
          Option("9P_FS", "mounts: (host folders over virtio-9p)"))
# `labctl fault` and `labctl link set --delay/--loss`: noted, not required (a lab runs
# without them; only those commands fail).
FAULTS = (Option("NET_SCH_NETEM", "faults and link delay/loss (tc netem)"),
          Option("NET_CLS_U32", "faults aimed at RDMA packets (tc u32)"),
          Option("NET_CLS_BPF", "faults aimed at RDMA packets (their eBPF gate)"),
          Option("BPF_SYSCALL", "faults aimed at RDMA packets (their eBPF gate)",
                 tristate=False))
ALL = (*BASE, RXE, SIW, *MOUNTS, *FAULTS)

_LINE = re.compile(r"^CONFIG_([A-Za-z0-9_]+)=(.*)$")


def parse(text: str) -> dict[str, str]:
    """A .config's set options: NAME (without CONFIG_) -> value ("y", "m", "0x1", ...).
    `# CONFIG_X is not set` lines and anything else are not set."""
    values = {}
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if match:
            values[match[1]] = match[2]
    return values


def needed(nodes: Iterable[Node]) -> list[Option]:
    """The options the nodes need, in ALL's order."""
    nodes = list(nodes)
    wanted = {o.name for o in BASE}
    if any(n.rdma == "rxe" for n in nodes):
        wanted.add(RXE.name)
    if any(n.rdma == "siw" for n in nodes):
        wanted.add(SIW.name)
    if any(n.mounts for n in nodes):
        wanted.update(o.name for o in MOUNTS)
    return [o for o in ALL if o.name in wanted]


def missing(config: dict[str, str], options: Iterable[Option]) -> list[Option]:
    return [o for o in options if config.get(o.name) not in ("y", "m")]


def fix_line(options: Iterable[Option], config_file: str = ".config") -> str:
    """One scripts/config command adding every option, then the command that fills in
    what they depend on."""
    words = ["scripts/config", "--file", config_file]
    for option in options:
        words += [f"--{'module' if option.tristate else 'enable'}", option.name]
    return f"{shlex.join(words)} && make olddefconfig"


def problem_lines(lacking: Iterable[Option]) -> list[str]:
    return [f"  CONFIG_{o.name} ({o.why}): {o.fix}" for o in lacking]


def enable(text: str, options: Iterable[Option]) -> tuple[str, list[Option]]:
    """`text` (a .config) with each option set as scripts/config would set it (=m for a
    tristate, =y else), and the options it changed. An option already =y or =m stays."""
    values = parse(text)
    changed = [o for o in options if values.get(o.name) not in ("y", "m")]
    if not changed:
        return text, []
    names = {o.name: o for o in changed}
    lines = []
    for line in text.splitlines():
        match = _LINE.match(line) or re.match(r"^# CONFIG_([A-Za-z0-9_]+) is not set$", line)
        if match and match[1] in names:
            continue  # replaced below, at the end as scripts/config appends
        lines.append(line)
    for option in changed:
        lines.append(f"CONFIG_{option.name}={'m' if option.tristate else 'y'}")
    return "\n".join(lines) + "\n", changed
