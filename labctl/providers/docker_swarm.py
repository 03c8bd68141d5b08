"""The docker provider across several hosts: one swarm, an overlay network per segment.

A docker lab whose `hosts:` place its nodes on two or more engines (docs/multi-host.md).
What it shares with the single-engine provider (images, containers by label, readiness,
exec) is ContainerProvider's; the swarm itself (forming it, its networks, leaving it) is
swarm.py's. Its links are overlay networks: no cable per node, so no `link set`, no
single node stopped and no repair (capabilities.SWARM).
"""

from __future__ import annotations

from typing import Any

import labctl.providers.swarm as swarm
from labctl.capabilities import SWARM
from labctl.dockerhost.hosts import HostsRecord, hosts_file
from labctl.dockerhost.sdk import sdk
from labctl.errors import LabctlError
from labctl.node.ready import NodeRuntime
from labctl.progress import Progress
from labctl.providers.docker import (
    LABEL,
    ContainerPlan,
    ContainerProvider,
    DockerProvider,
    container_facts,
    container_name,
    plan_lab,
)
from labctl.store.labdir import LabDir
from labctl.store.state import LabState, NodeStatus
from labctl.store.state_recorder import StateRecorder
from labctl.topology.resolved import Lab


class SwarmProvider(ContainerProvider):
    capabilities = SWARM

    def create(self, record: StateRecorder, progress: Progress) -> None:
        hosts, clients, manager = swarm.form(self.lab, self.labdir, progress)
        used = sorted(set(hosts.placement.values()))

        def prepare(host: str) -> tuple[dict[str, str], str]:
            images = self._images(clients[host], progress, f"{host}: ")
            facts = container_facts(clients[host], next(iter(images.values())))
            needs = {n.rdma for n in self.lab.nodes if hosts.placement[n.name] == host}
            for module in sorted(needs - {"none"}):
                if module not in facts.split():
                    raise LabctlError(f"{'rdma_rxe' if module == 'rxe' else module} is not "
                                      f"loaded on host {host} ({hosts.hosts[host].engine})",
                                      hint="modprobe it there; `labctl doctor` checks "
                                      "every host")
            return images, facts

        try:
            prepared = swarm.on_each_host(used, prepare)
            ids = swarm.create_networks(self.lab, self.owner, clients[manager], progress)

            def start(host: str) -> None:
                images, facts = prepared[host]
                rdma_cm = facts.split()[0] if ":" in facts else ""
                for cplan in plan_lab(self.lab, images, rdma_cm, self.owner).containers:
                    if hosts.placement[cplan.node] == host:
                        self._start_container(record, host, clients[host], cplan, ids,
                                              progress)

            swarm.on_each_host(used, start)
        finally:
            for c in clients.values():
                c.close()

    def _start_container(self, record: StateRecorder, host: str, c: Any,
                         cplan: ContainerPlan, ids: dict[str, str],
                         progress: Progress) -> None:
        """Create and start one node's container on `host`, on its overlay networks; an
        attachment the swarm failed to make is tried again with a new container."""
        node = cplan.node
        kwargs = dict(cplan.create)
        kwargs.pop("network_mode")
        net_kwargs, more = swarm.container_networking(self.lab, node, ids, c)
        kwargs["labels"] = {**kwargs["labels"], f"{LABEL}.host": host}
        for attempt in range(1, swarm.START_ATTEMPTS + 1):
            progress(f"{node}: creating container {kwargs['name']} on {host}")
            try:
                container = c.containers.create(**kwargs, **net_kwargs)
                for net_id, address, mac in more:
                    c.api.connect_container_to_network(
                        container.id, net_id, ipv4_address=address, mac_address=mac)
            except sdk().errors.APIError as exc:
                raise LabctlError(f"cannot create container {kwargs['name']} on {host}: "
                                  f"{exc.explanation}",
                                  hint="`labctl down` removes what was made") from None
            self._record_and_load(record, node, kwargs, container)
            try:
                container.start()
                return
            except sdk().errors.APIError as exc:
                if not swarm.attachment_failed(exc) or attempt == swarm.START_ATTEMPTS:
                    raise LabctlError(
                        f"cannot start container {kwargs['name']} on {host}: "
                        f"{exc.explanation}",
                        hint="`labctl doctor` checks the swarm ports; `labctl down` removes "
                        "what was made") from None
                progress(f"{node}: overlay attachment failed on {host} "
                         f"({exc.explanation}); creating the container again")
                container.remove(force=True)

    def _host_clients(self) -> dict[str, Any]:
        """host -> client (hosts that do not answer are missing)."""
        record = HostsRecord.load(hosts_file(self.labdir))
        clients = {}
        for name, host in (record.hosts if record else {}).items():
            try:
                clients[name] = swarm.client(host, timeout=30)
            except LabctlError:
                continue
        return clients

    def _clients(self, state: LabState) -> list[Any]:
        return list(self._host_clients().values())

    def nodes(self) -> list[NodeRuntime]:
        state = self.labdir.load_state()
        record = HostsRecord.load(hosts_file(self.labdir))
        placement = record.placement if record else {}
        clients = self._host_clients()
        try:
            containers = self._containers_of(list(clients.values()))
            result = []
            for node in self.lab.nodes:
                host = placement.get(node.name, "?")
                details = {"container": container_name(self.lab.name, node.name),
                           "host": host}
                container = containers.get(node.name)
                if container is None:
                    why = (f"host {host} does not answer" if host not in clients
                           else "never started" if node.name not in state.nodes
                           else "its container is gone")
                    result.append(NodeRuntime(node.name, NodeStatus.ABSENT, why, details))
                    continue
                result.append(self._runtime(node.name, container, state, details))
            return result
        finally:
            for client in clients.values():
                client.close()

    def _base_url(self, node: str) -> str:
        record = HostsRecord.load(hosts_file(self.labdir))
        if record is None or node not in record.placement:
            raise LabctlError(f"lab {self.lab.name} has no record of node {node}'s host",
                              hint=f"`labctl down --lab {self.lab.name}`")
        return record.hosts[record.placement[node]].base_url

    def _destroy_engine_side(self) -> list[str]:
        return swarm.destroy(self.lab.name, self.labdir)


def docker_provider(lab: Lab, labdir: LabDir) -> ContainerProvider:
    """The provider of a `provider: docker` lab (its factory in labctl/capabilities.py):
    the swarm's when its `hosts:` place the nodes on two or more hosts, else one engine's."""
    if swarm.is_multi_host(lab):
        return SwarmProvider(lab, labdir)
    return DockerProvider(lab, labdir)
