"""Providers turn a resolved Lab into running nodes: one class per kind of node."""

from __future__ import annotations

import importlib

from labctl.capabilities import providers, registered
from labctl.errors import UsageError
from labctl.providers.base import Provider
from labctl.store.labdir import LabDir
from labctl.topology.resolved import Lab


def provider_for(lab: Lab, labdir: LabDir) -> Provider:
    """The provider of `lab`, made by the factory its `provider:` is registered with
    (labctl/capabilities.py); its module is imported only now."""
    try:
        factory = registered(lab.provider).factory
    except KeyError:  # a lab directory's state.json names the provider `down` asks
        names = providers()
        raise UsageError(
            f"provider {lab.provider!r} is not available yet",
            hint=f"use {' or '.join(f'`provider: {n}`' for n in names)} in the topology",
        ) from None
    module, _, name = factory.partition(":")
    provider: Provider = getattr(importlib.import_module(module), name)(lab, labdir)
    return provider
