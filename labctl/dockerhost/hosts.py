"""The Docker engines of a multi-host lab, as recorded in its directory (hosts.json).

A docker lab whose nodes are placed on two or more hosts (`hosts:` in the topology) keeps
one record per host: its engine reference as written, the base URL it resolved to, the
labctl Docker host VM behind it (if any), and what labctl made there (the swarm it
created, if it did). `status`, `down` and `docker-host down` read it; labels on every
host stay the source of truth for containers and networks.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from labctl import bounded
from labctl.store.labdir import LabDir, running_labs
from labctl.store.state import ENGINE_URL_RE, atomic_write
from labctl.topology.model import HOST_NAME_RE, NODE_NAME_RE

HOSTS_FILE = "hosts.json"


@dataclass
class HostRecord:
    engine: str  # as written in the topology: local, vm:NAME, ssh://..., a context name
    base_url: str = ""
    vm: str = ""  # the labctl Docker host VM's name, for vm:NAME
    address: str = ""  # the swarm advertise address
    swarm_created: bool = False  # labctl ran `swarm init`/`join` here: `down` leaves it
    gwbridge_created: bool = False  # docker_gwbridge appeared with that: `down` removes it
    node_id: str = ""


@dataclass
class HostsRecord:
    hosts: dict[str, HostRecord] = field(default_factory=dict)
    placement: dict[str, str] = field(default_factory=dict)  # node -> host
    swarm_id: str = ""

    def save(self, path: Path) -> None:
        atomic_write(path, json.dumps(asdict(self), indent=2, sort_keys=True))

    @classmethod
    def load(cls, path: Path) -> HostsRecord | None:
        try:
            raw = bounded.load_object(bounded.read_text(path))
            record = cls({k: HostRecord(**v) for k, v in raw["hosts"].items()},
                         dict(raw["placement"]), str(raw.get("swarm_id", "")))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        return record if record.plausible() else None

    def plausible(self) -> bool:
        """Every value one labctl writes: `down` connects to these engines (an ssh:// URL
        reaches the ssh program) and stops these VMs, so hosts.json is data to check."""
        return all(isinstance(h.base_url, str) and isinstance(h.vm, str)
                   and (not h.base_url or re.fullmatch(ENGINE_URL_RE, h.base_url))
                   and re.fullmatch(r"([a-z][a-z0-9]{0,7})?", h.vm)
                   and re.fullmatch(HOST_NAME_RE, name)
                   for name, h in self.hosts.items()) and all(
            isinstance(n, str) and re.fullmatch(NODE_NAME_RE, n) for n in self.placement)


def hosts_file(labdir: LabDir) -> Path:
    return labdir.path / HOSTS_FILE


def labs_on_vm(vm: str) -> list[str]:
    """Labs with a node on the labctl Docker host VM named `vm`."""
    users = []
    for name in running_labs():
        record = HostsRecord.load(hosts_file(LabDir(name)))
        if record and any(h.vm == vm for h in record.hosts.values()):
            users.append(name)
    return users
