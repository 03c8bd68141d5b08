"""A lab for a test session: brought up (or reused) through the lifecycle service, torn
down through it, and what tests use of it: nodes, addresses, devices, testinfra hosts,
server/client runs. Nothing here imports pytest: the plugin's fixtures wrap it.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labctl.errors import LabctlError, UsageError, short_repr
from labctl.lab import lifecycle
from labctl.lab.handle import LabHandle
from labctl.runners.example_spec import Endpoint
from labctl.runners.execute import RunResult, endpoint, run_example
from labctl.runners.pairs import select_pairs
from labctl.store.labdir import DEFAULT_LAB_ENV, LabDir
from labctl.store.state import NodeStatus
from labctl.topology.catalog import find_topology
from labctl.topology.lookup import require_node
from labctl.topology.resolved import Lab

TESTINFRA_HINT = "pip install 'labctl[pytest]' (or pip install pytest-testinfra)"


class RdmaLabError(LabctlError):
    """A failure of the rdma_lab API inside a test: its text carries the hint, since a
    test's report shows str(exception) and nothing else of it."""

    def __str__(self) -> str:
        return self.message + (f"\nhint: {self.hint}" if self.hint else "")


def locate_topology(arg: str | Path, base: Path) -> Path:
    """A topology given to the plugin: a file relative to `base` (the invocation directory
    for the option, the test file's directory for the marker), else what `labctl up`
    takes (a path, or the name of a shipped topology)."""
    candidate = base / arg
    if candidate.is_file():
        return candidate
    return find_topology(arg)


@dataclass(frozen=True)
class LabSpec:
    """Which lab a session wants, and how to treat it."""

    topology: Path
    name: str | None = None  # overrides the topology's name
    keep: bool = False  # leave the lab up at the end (the next session reuses it)
    # True: remove a lab of that name first and make it anew; False: reuse a lab of that
    # name that is up from the same topology (a kept one), repairing dead nodes.
    fresh: bool = False
    options: lifecycle.UpOptions = field(default_factory=lifecycle.UpOptions)
    # True: use the lab `name` that is up, as it is, and leave it up (a session inside
    # `labctl matrix`, which brought the lab up on its kernel and takes it down itself)
    attach: bool = False
    # Called after the teardown with the lab's name and what destroy removed (checks).
    after_down: Callable[[str, list[str]], None] | None = None

    def up_options(self) -> lifecycle.UpOptions:
        if self.name is None:
            return self.options
        return dataclasses.replace(self.options, name=self.name)


def _progress(name: str) -> Callable[[str], None]:
    """Progress lines on stderr (pytest shows them with -s, or with a failed setup), each
    once: `up` reports the same step again as its seconds count up."""
    last = [""]

    def report(message: str) -> None:
        step = re.sub(r"\(\d+(\.\d+)? s\)", "", message)
        if step != last[0]:
            last[0] = step
            print(f"rdma_lab {name}: {message}", file=sys.stderr, flush=True)

    return report


def _same_lab(a: Lab, b: Lab) -> bool:
    """Same nodes, links and provider (the source path may be spelled differently)."""
    return dataclasses.replace(a, source="") == dataclasses.replace(b, source="")


def attach_lab(name: str) -> RdmaLab:
    """The lab `name` that is up, used as it is: the session neither repairs nor removes it."""
    labdir = LabDir(name)
    if not labdir.exists():
        raise UsageError(f"lab {name} ({DEFAULT_LAB_ENV}) is not up",
                         hint=f"bring it up with `labctl up`, or unset {DEFAULT_LAB_ENV} to "
                         "have the session make its lab from the topology")
    return RdmaLab(LabHandle(labdir, per_command=False), None)


def start_lab(spec: LabSpec) -> RdmaLab:
    """The spec's lab, up: made, reused (kept by an earlier session) or repaired; the lab
    that is up, as it is, for an attached spec."""
    if spec.attach and spec.name is not None:
        return attach_lab(spec.name)
    options = spec.up_options()
    wanted = lifecycle.resolve(spec.topology, options)  # bad input refused before anything
    labdir = LabDir(wanted.name)
    if spec.fresh:
        lifecycle.destroy(wanted.name)  # left by an interrupted earlier session
    elif labdir.exists():
        up = labdir.load_lab()
        if not _same_lab(up, wanted):
            raise UsageError(
                f"lab {wanted.name} is up from another topology ({up.source})",
                hint=f"`labctl down --lab {wanted.name}`, or name this session's lab "
                "with --rdma-lab-name")
        handle = LabHandle(labdir, per_command=False)
        if all(n.state == NodeStatus.RUNNING for n in handle.provider.nodes()):
            return RdmaLab(handle, None)
    made = not labdir.exists()
    try:
        result = lifecycle.up(spec.topology, options, _progress(wanted.name), resolved=wanted)
    except BaseException:
        if made and not spec.keep:  # nothing half-made is left by a session that made it
            lifecycle.destroy(wanted.name)
        raise
    return RdmaLab(LabHandle(result.labdir, per_command=False), result)


def stop_lab(lab: RdmaLab) -> list[str]:
    return lifecycle.destroy(lab.name)


class RdmaLab:
    """A lab that is up, as a test sees it (the `rdma_lab` fixture)."""

    def __init__(self, handle: LabHandle, up_result: lifecycle.UpResult | None) -> None:
        self.handle = handle
        self.up_result = up_result  # None when an earlier session's lab was reused
        self._hosts: dict[str, Any] = {}

    @property
    def name(self) -> str:
        return self.handle.lab.name

    @property
    def lab(self) -> Lab:
        return self.handle.lab

    @property
    def nodes(self) -> list[str]:
        return [n.name for n in self.lab.nodes]

    def _check(self, node: str) -> None:
        try:
            require_node(self.lab, node)
        except UsageError as exc:
            raise RdmaLabError(exc.message, exc.hint) from None

    def _endpoint(self, node: str) -> Endpoint:
        self._check(node)
        try:
            return endpoint(self.handle, node)
        except LabctlError as exc:
            raise RdmaLabError(exc.message, exc.hint) from None

    def address(self, node: str, interface: str | None = None) -> str:
        """The node's data address: of its RDMA interface, or of `interface` (eth2...)."""
        self._check(node)
        lab_node = self.lab.node(node)
        interfaces = lab_node.interfaces
        # The RDMA interface, not the first one: with rdma_interfaces it can be eth2.
        if interface is None and lab_node.rdma_interface is not None:
            return lab_node.rdma_interface.address
        for iface in interfaces:
            if interface is None or iface.name == interface:
                return iface.address
        raise RdmaLabError(f"node {node} has no data interface {short_repr(interface)}",
                           hint="interfaces: " + (", ".join(i.name for i in interfaces)
                                                  or "none"))

    def device(self, node: str) -> str:
        """The node's RDMA device (rxe0, siw0; rxe_LAB_NODE in docker labs)."""
        return self._endpoint(node).device

    def gid_index(self, node: str) -> int | None:
        """The RoCE v2 GID index of the node's data address (None on siw)."""
        return self._endpoint(node).gid_index

    def run(self, node: str, command: str | list[str], *, timeout: float = 300,
            ) -> subprocess.CompletedProcess[str]:
        """Run `command` (a shell line, or an argv) in `node`; never raises on its exit."""
        self._check(node)
        argv = ["sh", "-c", command] if isinstance(command, str) else list(command)
        return self.handle.run(node, argv, timeout=timeout)

    def host(self, node: str) -> Any:
        """A testinfra Host on `node`, over the lab's ssh (qemu and vagrant labs)."""
        self._check(node)
        if node in self._hosts:
            return self._hosts[node]
        config = self.handle.labdir.ssh_config
        if not config.is_file():
            raise RdmaLabError(
                f"lab {self.name} ({self.lab.provider}) has no ssh config: host() reaches "
                "nodes over the lab's ssh, which qemu and vagrant labs have",
                hint="in docker labs use rdma_lab.run(node, command)")
        try:
            import testinfra
        except ImportError:
            raise RdmaLabError("rdma_lab.host() needs pytest-testinfra, which is not "
                               "installed", hint=TESTINFRA_HINT) from None
        host = testinfra.get_host(f"ssh://{node}", ssh_config=str(config))
        self._hosts[node] = host
        return host

    def run_pair(self, server_cmd: str, client_cmd: str, *, server: str | None = None,
                 client: str | None = None, ready_port: int | None = None,
                 port: int | None = None, timeout: float = 120.0) -> RunResult:
        """Run `server_cmd` in `server` and, once it is ready, `client_cmd` in `client`,
        with labctl's runner (bounded in the node, output captured, server stopped for real
        at the end), exactly as `labctl run custom`. Placeholders: {server_ip} {client_ip}
        {device} {gid_index} {port} ({device} and {gid_index} are those of the node the
        command runs in; {port} is `port`, else `ready_port`, else 18515); other braces
        are written twice. Ready: once something listens on TCP `ready_port` in the
        server node (without it, one second after the start).
        Returns the run record (status passed/failed, outputs, exit reasons, seconds)."""
        from labctl.runners.custom import DEFAULT_PORT, custom_spec

        for node in (server, client):
            if node is not None:
                self._check(node)
        try:  # the pair as `labctl run` picks it, the keywords named as here
            [(server, client)] = select_pairs(self.lab, server=server, client=client,
                                              names=("server", "client"))
        except UsageError as exc:
            raise RdmaLabError(exc.message, exc.hint) from None
        if ready_port is not None and (isinstance(ready_port, bool) or not isinstance(
                ready_port, int) or not 1 <= ready_port <= 65535):
            raise RdmaLabError(f"ready_port must be a TCP port, 1 to 65535 (got "
                               f"{short_repr(ready_port)})", hint="e.g. ready_port=18515")
        chosen = port or ready_port or DEFAULT_PORT
        try:  # templates, port range and seconds are checked before anything runs
            spec = custom_spec(server_cmd, client_cmd, ready_port=ready_port)
            return run_example(self.handle, spec, server, client,
                               {"timeout": timeout, "port": chosen})
        except LabctlError as exc:
            raise RdmaLabError(exc.message, exc.hint) from None
