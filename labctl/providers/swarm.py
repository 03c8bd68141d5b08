"""Multi-host docker labs: the lab's hosts in one Docker Swarm, one overlay per segment.

Used by the docker provider when a lab's nodes are placed on two or more hosts (`hosts:`
in the topology). Docker Swarm, built into every engine, does the cross-host part:

  swarm     `init` on the first host (advertising its address on the hosts' network for a
            labctl Docker host VM), `join` as workers on the others; hosts already in one
            swarm are reused (and left alone by `down`). Join tokens go to the lab
            directory (swarm-tokens.json, 0600) and are never printed or logged.
  networks  one attachable, internal (no gateway bridge, no route out) overlay network per
            segment, with the segment's subnet, so Docker's IPAM and its VXLAN neighbour
            entries know the very addresses labctl gives: the overlay answers ARP itself
            from those entries. Docker's gateway address is the highest free one of the
            subnet. MTU = the segment's: VXLAN adds 50 bytes per frame, which the hosts'
            network (MTU 9100 between labctl's VMs) carries, so rxe reports the same active
            MTU as on one host.
  nodes     each container is created on its host's engine attached to its segments'
            networks with its MAC and address (node-init.sh finds its NICs by MAC, names
            them and creates its rxe as on one host).

Labels (labctl, labctl.lab, labctl.node / labctl.segment) are the source of truth on
every host; hosts.json in the lab directory says which engines to ask (HostsRecord).
"""

from __future__ import annotations

import ipaddress
import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from labctl.dockerhost.hosts import HostRecord, HostsRecord, hosts_file
from labctl.dockerhost.sdk import sdk
from labctl.dockerhost.vm import DockerHostVM
from labctl.errors import LabctlError
from labctl.net import labnet
from labctl.progress import Progress
from labctl.providers.base import UnsupportedError
from labctl.providers.labels import LABEL, lab_labels, lab_selector, owned_by
from labctl.store.labdir import LabDir, running_labs
from labctl.topology.resolved import Lab, Segment

TOKENS_FILE = "swarm-tokens.json"
SWARM_PORT = 2377
GWBRIDGE = "docker_gwbridge"


def is_multi_host(lab: Lab) -> bool:
    placement = lab.provider_options.get("placement") or {}
    return len(set(placement.values())) >= 2


def single_host_engine(lab: Lab) -> str | None:
    """The engine reference of a lab whose nodes all sit on one host of `hosts:`."""
    placement = lab.provider_options.get("placement") or {}
    used = set(placement.values())
    if len(used) != 1:
        return None
    return str(lab.provider_options["hosts"][used.pop()])


def network_name(lab: str, segment: Segment) -> str:
    return f"labctl-{lab}-{segment.name}"


def dynamic_range(segment: Segment, used: set[str]) -> tuple[str, str]:
    """(ip_range, gateway) for the overlay's IPAM: Docker takes its gateway and one address
    per host (the network's load-balancer endpoint) from ip_range, so that range must hold
    no node address, or a node's own address is "already in use" (measured). The largest
    block at the top of the subnet without node addresses, at least /29; the gateway is
    its last usable address."""
    net = ipaddress.IPv4Network(segment.subnet)
    addresses = {ipaddress.IPv4Address(a) for a in used}
    for prefix in range(net.prefixlen + 1, 30):
        block = list(net.subnets(new_prefix=prefix))[-1]
        if not any(a in block for a in addresses):
            return str(block), str(block.broadcast_address - 1)
    raise UnsupportedError(
        f"segment {segment.name} ({segment.subnet}) has no free block of 8 addresses at its "
        "top for Docker's own addresses (gateway, one per host)",
        hint="give the link a larger subnet (a /24 fits 247 nodes and Docker's addresses)")


@dataclass(frozen=True)
class NetworkPlan:
    segment: str
    create: dict[str, Any]  # keyword arguments of client.networks.create (ipam as a dict)


def plan_networks(lab: Lab, owner: str) -> list[NetworkPlan]:
    """The overlay networks of a multi-host lab, as data (unit-tested)."""
    plans = []
    for segment in lab.segments:
        used = {i.address for n in lab.nodes for i in n.interfaces if i.segment == segment.index}
        ip_range, gw = dynamic_range(segment, used)
        plans.append(NetworkPlan(segment.name, {
            "name": network_name(lab.name, segment),
            "driver": "overlay",
            "attachable": True,
            "internal": True,
            "options": {"com.docker.network.driver.mtu": str(segment.mtu)},
            "ipam": {"Driver": "default", "Config": [
                {"Subnet": segment.subnet, "IPRange": ip_range, "Gateway": gw}]},
            "labels": lab_labels(lab.name, owner) | {f"{LABEL}.segment": segment.name},
        }))
    return plans


def endpoints(lab: Lab, node_name: str) -> list[tuple[str, str, str]]:
    """(network, ipv4, mac) of a node's interfaces, in interface order."""
    node = lab.node(node_name)
    return [(network_name(lab.name, lab.segments[i.segment]), i.address, i.mac)
            for i in node.interfaces]


# --- hosts ----------------------------------------------------------------------------
def _ssh_host(url: str) -> str:
    rest = url.removeprefix("ssh://")
    return rest.rpartition("@")[2].partition(":")[0]


def resolve_host(ref: str, progress: Progress) -> HostRecord:
    """The engine behind a `hosts:` value; a labctl Docker host VM is started if needed."""
    if ref == "local":
        from labctl.dockerhost.engine import local_base_url

        return HostRecord(ref, local_base_url())
    if ref.startswith("vm:"):
        vm = DockerHostVM(ref.removeprefix("vm:"))
        if not vm.named:
            raise UnsupportedError("vm:default has no address on the Docker hosts' network",
                                   hint="use named VMs: `labctl docker-host up --name sw1`")
        vm.up(lambda m: progress(f"{vm.name}: {m}"))
        return HostRecord(ref, vm.base_url, vm=vm.name, address=vm.host_address)
    if ref.startswith(("ssh://", "unix://")):
        return HostRecord(ref, ref, address=_ssh_host(ref) if ref.startswith("ssh://") else "")
    try:  # a docker context name
        context = sdk().context.ContextAPI.get_context(ref)
    except Exception as exc:  # the SDK raises several kinds for a bad context store
        raise LabctlError(f"cannot read docker context {ref!r}: {exc}",
                          hint="`docker context ls` lists them") from None
    if context is None or not context.Host:
        raise LabctlError(f"no docker context named {ref!r}",
                          hint="`docker context ls` lists them; or write an engine URL")
    return HostRecord(ref, str(context.Host))


def client(record: HostRecord, timeout: int = 120) -> Any:
    try:
        c = sdk().DockerClient(base_url=record.base_url, timeout=timeout,
                               use_ssh_client=record.base_url.startswith("ssh://"))
        c.ping()
    except Exception as exc:  # the SDK raises many kinds
        raise LabctlError(f"the Docker engine {record.engine} ({record.base_url}) does not "
                          f"answer: {exc}", hint="start it (`labctl docker-host up --name "
                          "NAME` for vm:NAME); `labctl doctor` checks every host") from None
    return c


# --- swarm ----------------------------------------------------------------------------
def _write_tokens(labdir: LabDir, tokens: dict[str, str]) -> None:
    path = labdir.path / TOKENS_FILE
    path.unlink(missing_ok=True)  # a new file: never written through a planted link
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(tokens, out)
    os.chmod(path, 0o600)


def _swarm_info(c: Any) -> dict[str, Any]:
    return dict(c.info().get("Swarm") or {})


def _init_or_join(records: dict[str, HostRecord], clients: dict[str, Any], labdir: LabDir,
                  hosts: HostsRecord, progress: Progress) -> str:
    """Put every host in one swarm; returns the name of a manager host."""
    infos = {h: _swarm_info(c) for h, c in clients.items()}
    for name, c in clients.items():
        if infos[name].get("LocalNodeState") != "active":
            # swarm init/join makes docker_gwbridge when missing; `down` removes it then.
            records[name].gwbridge_created = not c.networks.list(names=[GWBRIDGE])
    active = [h for h, i in infos.items() if i.get("LocalNodeState") == "active"]
    managers = [h for h in active if infos[h].get("ControlAvailable")]
    if active and not managers:
        raise UnsupportedError(
            f"hosts {', '.join(active)} are swarm workers, and no host of the lab is a "
            "manager of their swarm", hint="add a manager of that swarm to hosts:, or make "
            "them leave it (`docker swarm leave`)")
    if managers:
        manager = managers[0]
        cluster = infos[manager].get("Cluster", {}).get("ID", "")
        members = {n.id for n in clients[manager].nodes.list()}
        strangers = [h for h in active if infos[h].get("NodeID") not in members]
        if strangers:
            raise UnsupportedError(
                f"hosts {', '.join(strangers)} are in another swarm than {manager}",
                hint="make them leave it (`docker swarm leave`), or use other hosts")
        progress(f"swarm: reusing the swarm of {manager}")
    else:
        manager = next(iter(records))
        record = records[manager]
        progress(f"swarm: init on {manager}")
        listen = f"{record.address}:{SWARM_PORT}" if record.address else "0.0.0.0:2377"
        try:
            clients[manager].swarm.init(advertise_addr=record.address or None,
                                        listen_addr=listen,
                                        data_path_addr=record.address or None)
        except sdk().errors.APIError as exc:
            raise LabctlError(f"swarm init on {manager} failed: {exc.explanation}",
                              hint="with several interfaces Docker needs an address: use a "
                              "labctl VM or ssh://user@ADDRESS") from None
        record.swarm_created = True
        hosts.save(hosts_file(labdir))
        cluster = _swarm_info(clients[manager]).get("Cluster", {}).get("ID", "")
    clients[manager].swarm.reload()
    tokens = clients[manager].swarm.attrs["JoinTokens"]
    _write_tokens(labdir, {"worker": tokens["Worker"]})
    manager_addr = (records[manager].address
                    or _swarm_info(clients[manager]).get("NodeAddr", ""))
    for name, record in records.items():
        if name == manager or name in active:
            continue
        progress(f"swarm: {name} joins")
        listen = f"{record.address}:{SWARM_PORT}" if record.address else "0.0.0.0:2377"
        try:
            clients[name].swarm.join(remote_addrs=[f"{manager_addr}:{SWARM_PORT}"],
                                     join_token=tokens["Worker"], listen_addr=listen,
                                     advertise_addr=record.address or None,
                                     data_path_addr=record.address or None)
        except sdk().errors.APIError as exc:
            # The token is in the request, never in the engine's answer.
            raise LabctlError(f"{name} cannot join the swarm of {manager}: {exc.explanation}",
                              hint="ports 2377/tcp, 7946/tcp+udp and 4789/udp must be open "
                              "between the hosts (`labctl doctor`)") from None
        record.swarm_created = True
        hosts.save(hosts_file(labdir))
    for name, c in clients.items():
        records[name].node_id = str(_swarm_info(c).get("NodeID", ""))
    hosts.swarm_id = str(cluster)
    hosts.save(hosts_file(labdir))
    _wait_nodes_ready(clients[manager], {r.node_id for r in records.values()}, progress)
    return manager


def _wait_nodes_ready(manager: Any, node_ids: set[str], progress: Progress,
                      timeout: float = 180) -> None:
    """Until the manager sees every host's node ready: a worker without a session to its
    manager cannot attach a container to an overlay network."""
    deadline = time.monotonic() + timeout
    while True:
        ready = {n.id for n in manager.nodes.list()
                 if n.attrs.get("Status", {}).get("State") == "ready"}
        if node_ids <= ready:
            return
        if time.monotonic() > deadline:
            raise LabctlError(f"swarm nodes not ready after {timeout:.0f} s: "
                              f"{', '.join(sorted(node_ids - ready))}",
                              hint="`labctl doctor` checks the swarm ports between hosts; "
                              "`labctl down` removes what was made")
        progress("swarm: waiting for every host's node to be ready")
        time.sleep(1)


# A worker (and a manager for itself) asks the swarm for a container's overlay attachment
# within dockerd's own 20 s bound: on a loaded host that times out now and then (measured
# under TCG with every core busy: "attaching to network failed ... context deadline
# exceeded", and on starting the same container again "network ... not found"). The
# container is then made again, from scratch, a bounded number of times.
START_ATTEMPTS = 3


def attachment_failed(exc: Exception) -> bool:
    text = str(exc)
    return "attaching to network failed" in text or (
        "network" in text and "not found" in text)


T = TypeVar("T")


def on_each_host(hosts: list[str], work: Callable[[str], T]) -> dict[str, T]:
    """`work` on every host at once: each engine is a machine of its own, and under TCG
    a VM's boot, a host's image check (a throwaway container) and each container's start
    take 10-60 s. The results by host (in `hosts`' order), or the first host's error once
    every host has finished (so that what each one made is recorded for `down`)."""
    with ThreadPoolExecutor(max_workers=len(hosts) or 1) as pool:
        futures = {host: pool.submit(work, host) for host in hosts}
    return {host: future.result() for host, future in futures.items()}


def form(lab: Lab, labdir: LabDir, progress: Progress) -> tuple[HostsRecord, dict[str, Any],
                                                               str]:
    """Resolve the lab's hosts, connect, and put them in one swarm."""
    hosts = HostsRecord(placement=dict(lab.provider_options["placement"]))
    used = [h for h in lab.provider_options["hosts"] if h in set(hosts.placement.values())]
    # each labctl VM that is not running boots (about a minute under TCG)
    hosts.hosts = on_each_host(
        used, lambda h: resolve_host(str(lab.provider_options["hosts"][h]), progress))
    hosts.save(hosts_file(labdir))
    clients = {name: client(record, timeout=900) for name, record in hosts.hosts.items()}
    manager = _init_or_join(hosts.hosts, clients, labdir, hosts, progress)
    return hosts, clients, manager


def create_networks(lab: Lab, owner: str, manager: Any,
                    progress: Progress) -> dict[str, str]:
    """Overlay networks on a manager: network name -> id."""
    ids = {}
    for plan in plan_networks(lab, owner):
        kwargs = dict(plan.create)
        ipam = kwargs.pop("ipam")
        config = ipam["Config"][0]
        pool = sdk().types.IPAMPool(subnet=config["Subnet"], iprange=config["IPRange"],
                                    gateway=config["Gateway"])
        progress(f"network {kwargs['name']} (overlay, {ipam['Config'][0]['Subnet']})")
        try:
            net = manager.networks.create(ipam=sdk().types.IPAMConfig(pool_configs=[pool]),
                                          check_duplicate=True, **kwargs)
        except sdk().errors.APIError as exc:
            raise LabctlError(f"cannot create overlay network {kwargs['name']}: "
                              f"{exc.explanation}",
                              hint="`labctl down` first if a lab of this name was left "
                              "behind") from None
        ids[kwargs["name"]] = net.id
    return ids


def container_networking(lab: Lab, node: str, ids: dict[str, str],
                         c: Any) -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
    """create() keywords for the node's first network, and the rest to connect before start."""
    eps = endpoints(lab, node)
    if not eps:
        return {"network_mode": "none"}, []
    first, address, mac = eps[0]
    config = c.api.create_endpoint_config(ipv4_address=address, mac_address=mac)
    return ({"network": ids[first], "networking_config": {ids[first]: config}},
            [(ids[n], a, m) for n, a, m in eps[1:]])


# --- down -----------------------------------------------------------------------------
def _shared_with_other_labs(lab: str, record: HostRecord) -> bool:
    for name in running_labs():
        if name == lab:
            continue
        other = HostsRecord.load(hosts_file(LabDir(name)))
        if other and any(h.base_url == record.base_url for h in other.hosts.values()):
            return True
    return False


def destroy(lab: str, labdir: LabDir) -> list[str]:
    """Containers on every host, then the networks, then a swarm labctl made. A host that
    does not answer (or fails a step): the others are cleaned, then LabctlError, with the
    records kept so that `down` can be run again."""
    hosts = HostsRecord.load(hosts_file(labdir))
    if hosts is None:
        return []
    removed: list[str] = []
    clients: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for name, record in hosts.hosts.items():
        if not record.base_url:
            continue
        try:
            clients[name] = client(record, timeout=60)
        except LabctlError as exc:
            failed[name] = exc.message

    def step(name: str, what: Any) -> None:
        """One host's step; an engine error marks the host failed instead of aborting."""
        if name in failed:
            return
        try:
            what()
        except Exception as exc:  # the SDK raises many kinds; each is reported below
            failed[name] = f"{exc.__class__.__name__}: {exc}"

    selector = lab_selector(lab)
    owner = labnet.owner_mark(labdir.path)

    def containers(name: str, c: Any) -> None:
        for container in c.containers.list(all=True, filters=selector):
            if owned_by(container.labels, lab, owner):
                container.remove(force=True)
                removed.append(f"container {container.name} on {name}")

    def networks(c: Any) -> None:
        for net in c.networks.list(filters=selector):
            if owned_by(net.attrs.get("Labels"), lab, owner):
                _remove_network(net)
                removed.append(f"network {net.name}")

    def leave(name: str, record: HostRecord, c: Any) -> None:
        if _swarm_info(c).get("LocalNodeState") == "active":
            c.swarm.leave(force=True)
            removed.append(f"swarm membership of {name}")
        if record.gwbridge_created:
            # Made by swarm init/join for the host's swarm endpoints: goes with it.
            for net in c.networks.list(names=[GWBRIDGE]):
                _remove_network(net)
                removed.append(f"network {GWBRIDGE} on {name}")
            record.gwbridge_created = False
        record.swarm_created = False
        hosts.save(hosts_file(labdir))

    for name, c in clients.items():
        step(name, lambda n=name, c=c: containers(n, c))
    managers = [h for h in clients if h not in failed
                and _swarm_info(clients[h]).get("ControlAvailable")]
    if managers:
        step(managers[0], lambda: networks(clients[managers[0]]))
    # Workers first: a manager that leaves first would strand them.
    for name in sorted(clients, key=lambda h: h in managers):
        record = hosts.hosts[name]
        if record.swarm_created and not _shared_with_other_labs(lab, record):
            step(name, lambda n=name, r=record, c=clients[name]: leave(n, r, c))
    for c in clients.values():
        c.close()
    if failed:
        raise LabctlError(
            "cannot clean up " + "; ".join(f"{h}: {m}" for h, m in failed.items())
            + (f"\nremoved: {', '.join(removed)}" if removed else ""),
            hint="start that host's engine (or wait for it), then `labctl down` again "
            "(the lab's records are kept)")
    (labdir.path / TOKENS_FILE).unlink(missing_ok=True)
    return removed


def _remove_network(net: Any) -> None:
    """A worker's endpoint leaves the overlay a moment after its container: retry briefly."""
    deadline = time.monotonic() + 60
    while True:
        try:
            net.remove()
            return
        except sdk().errors.NotFound:
            return
        except sdk().errors.APIError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def tokens_path(labdir: LabDir) -> Path:
    return labdir.path / TOKENS_FILE
