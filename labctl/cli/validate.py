"""`labctl validate TOPOLOGY` and `labctl schema`: check a topology file, print its schema.

Imports of the topology layer (pydantic, yaml) happen inside the commands so that
building the CLI stays fast.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import typer
from typing_extensions import TypedDict

from labctl.cli.common import AllowHostMountOption, TopologyArgument

if TYPE_CHECKING:
    from labctl.topology.errors import TopologyError
    from labctl.topology.resolved import Lab


class TopologyProblem(TypedDict):
    """One problem of a topology file, as its `file:line: field: message` line says."""

    file: str
    line: int | None  # 1-based; null when unknown (a file that cannot be read)
    field: str  # e.g. nodes.node1.rdma, links[0].endpoints[1]; "" for the file as a whole
    message: str
    hint: str


class ValidateProblems(TypedDict):
    """`labctl validate --json` of a topology with problems (exit 2): the problems listed
    (file order, at most 20) and how many more there are."""

    problems: list[TopologyProblem]
    more: int


def problems_document(err: TopologyError) -> ValidateProblems:
    return {"problems": [{"file": err.file, "line": p.line, "field": p.field,
                          "message": p.message, "hint": p.hint} for p in err.problems],
            "more": err.more}


def mount_lines(lab: Lab) -> list[str]:
    """Every host folder the lab shares, per node: what a node can reach on the host."""
    mounted = [(node.name, m) for node in lab.nodes for m in node.mounts]
    if not mounted:
        return []
    width = max(len(name) for name, _ in mounted)
    return ["mounts (host folder -> node path):"] + [
        f"  {name:<{width}}  {m.source} -> {m.target}  {'ro' if m.readonly else 'rw'}"
        for name, m in mounted]


def summary(lab: Lab) -> str:
    """A short human summary of a resolved lab: nodes, RDMA devices, segments, addresses."""
    nodes = len(lab.nodes)
    segs = len(lab.segments)
    lines = [
        f"lab {lab.name}: {nodes} node{'s' * (nodes != 1)}, {segs} segment{'s' * (segs != 1)}, "
        f"provider {lab.provider} (from {lab.source})",
        "nodes:",
    ]
    width = max(len(n.name) for n in lab.nodes)
    for node in lab.nodes:
        rdma: str = node.rdma
        if node.rdma_interface is not None:
            rdma = f"{node.rdma} on {', '.join(i.name for i in node.rdma_interfaces)}"
        ifaces = ", ".join(f"{i.name} {i.ipv4}" for i in node.interfaces) or "no data links"
        lines.append(
            f"  {node.name:<{width}}  rdma {rdma:<11}  {node.memory_mib} MiB, "
            f"{node.cpus} cpu{'s' * (node.cpus != 1)}, image {node.image}  {ifaces}"
        )
    if lab.segments:
        lines.append("segments:")
        width = max(len(s.name) for s in lab.segments)
        net_width = max(len(s.subnet) for s in lab.segments)
        for seg in lab.segments:
            members = []
            for endpoint in seg.endpoints:
                node_name, _, ifname = endpoint.partition(":")
                iface = next(i for i in lab.node(node_name).interfaces if i.name == ifname)
                members.append(f"{endpoint}={iface.address}")
            subnet = f"{seg.subnet:<{net_width}}"
            lines.append(
                f"  {seg.name:<{width}}  {seg.kind:<6}  {subnet}  mtu {seg.mtu:<4}  "
                + " ".join(members)
            )
    lines += mount_lines(lab)
    routed = [n for n in lab.nodes if n.router or n.routes]
    if routed:
        lines.append("routing:")
        width = max(len(n.name) for n in routed)
        for node in routed:
            routes = ", ".join(f"{r.to} via {r.via}" for r in node.routes) or "no routes"
            lines.append(f"  {node.name:<{width}}  {'router, ' if node.router else ''}{routes}")
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    @app.command("validate")
    def validate(
        topology: str = TopologyArgument,
        as_json: bool = typer.Option(False, "--json", help="Print the resolved lab as JSON; "
                                     "a file with problems: the problems (exit 2)."),
        vagrant: bool = typer.Option(
            False, "--vagrant", help="With --json: add what the Vagrantfile builds (\"vagrant\": "
            "boxes, networks, node settings), as a plain `vagrant up` reads it."),
        allow_mounts: list[str] = AllowHostMountOption,
    ) -> None:
        """Check a topology (a file or a shipped one) and show the lab it describes
        (addresses, MACs, devices). A kernel of the nodes' own (a path) is checked for the
        options they need, as `up` checks it. qemu nodes that need more memory together than the
        host has are refused; more than it has free now (MemAvailable) is warned about."""
        from labctl.capabilities import for_provider
        from labctl.errors import LabctlError, UsageError
        from labctl.lab.lifecycle import check_own_kernels
        from labctl.providers import vagrant_plan
        from labctl.topology.catalog import find_topology
        from labctl.topology.errors import TopologyError
        from labctl.topology.host import HostFacts, resolve_allowances
        from labctl.topology.hostmemory import available_mib, memory_warning
        from labctl.topology.load import load_lab

        try:
            if vagrant and not as_json:
                raise UsageError("--vagrant goes with --json",
                                 hint="labctl validate --json --vagrant TOPOLOGY")
            lab = load_lab(find_topology(topology),
                           allowances=resolve_allowances(allow_mounts or []),
                           host=HostFacts.this())
            # A kernel of the nodes' own against what they need, as `up` checks it first.
            check_own_kernels(lab, for_provider(lab.provider))
            text = (vagrant_plan.document(lab, None, os.environ) if vagrant
                    else lab.to_json() if as_json else summary(lab))
        except LabctlError as exc:
            if as_json and isinstance(exc, TopologyError):  # the file's problems, as data
                typer.echo(json.dumps(problems_document(exc)))
            # Report here too (not only in main()) so that the exit code and message are
            # the same when the app is driven directly, e.g. by tests.
            typer.echo(f"error: {exc.message}", err=True)
            if exc.hint:
                typer.echo(f"hint: {exc.hint}", err=True)
            raise typer.Exit(exc.exit_code) from None
        # Beyond the host's memory the checks above refused (exit 2); beyond what is free
        # now is worth saying, not refusing: other labs come and go.
        warning = memory_warning(lab, available_mib())
        if warning:
            typer.echo(f"warning: {warning}", err=True)
        typer.echo(text)

    @app.command("schema")
    def schema() -> None:
        """Print the JSON Schema of topology files (saved as topologies/schema.json)."""
        from labctl.topology.load import schema_text

        typer.echo(schema_text(), nl=False)
