"""Providers turn a resolved Lab into running nodes: one class per kind of node."""

from __future__ import annotations

from labctl.errors import UsageError
from labctl.providers.base import Provider
from labctl.store.labdir import LabDir
from labctl.topology.resolved import Lab


def provider_for(lab: Lab, labdir: LabDir) -> Provider:
    if lab.provider == "qemu":
        from labctl.providers.qemu import QemuProvider

        return QemuProvider(lab, labdir)
    if lab.provider == "docker":
        from labctl.providers.swarm import is_multi_host

        if is_multi_host(lab):
            from labctl.providers.docker_swarm import SwarmProvider

            return SwarmProvider(lab, labdir)
        from labctl.providers.docker import DockerProvider

        return DockerProvider(lab, labdir)
    if lab.provider == "vagrant":
        from labctl.providers.vagrant import VagrantProvider

        return VagrantProvider(lab, labdir)
    raise UsageError(
        f"provider {lab.provider!r} is not available yet",
        hint="use `provider: qemu` or `provider: vagrant` in the topology",
    )
