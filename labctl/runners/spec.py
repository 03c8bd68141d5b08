"""What an example is: programs, arguments, readiness, output parser, support matrix."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Endpoint:
    """One side of a run: its node, RDMA device, GID index and data address."""

    node: str
    device: str
    device_type: str  # rxe | siw
    gid_index: int | None
    address: str


@dataclass(frozen=True)
class RunContext:
    server: Endpoint
    client: Endpoint
    options: dict[str, Any] = field(default_factory=dict)

    def opt(self, name: str, default: Any = None) -> Any:
        value = self.options.get(name)
        return default if value is None else value


ArgvBuilder = Callable[[RunContext], list[str]]
Parser = Callable[[str], dict[str, Any]]


@dataclass(frozen=True)
class ExampleSpec:
    name: str  # e.g. "pingpong"
    variant: str  # e.g. "rc" (the transport or test)
    server_argv: ArgvBuilder
    client_argv: ArgvBuilder
    parse: Parser  # client output -> figures
    devices: frozenset[str]  # device types it works on
    unsupported_reason: str = ""  # why not on the other device types
    # shell snippet run on the server node; exit 0 once the server listens
    ready_probe: Callable[[RunContext], str] | None = None
    timeout: float = 120.0
    key_figure: str = ""  # the figure a summary shows
    parse_server: Parser | None = None

    @property
    def label(self) -> str:
        return f"{self.name} {self.variant}".strip()

    def supports(self, device_type: str) -> bool:
        return device_type in self.devices
