"""`labctl up TOPOLOGY`: build or reuse the image, start the nodes, wait for RDMA."""

from __future__ import annotations

from pathlib import Path

import typer

from labctl.cli.common import console, progress_reporter
from labctl.lab import lifecycle


def up(
    topology: Path = typer.Argument(..., help="Topology file (YAML)."),
    accel: str = typer.Option("auto", help="qemu accelerator: auto (probe KVM), kvm or tcg."),
    mirror: str = typer.Option(None, help="Debian mirror URL for image builds."),
    timeout: float = typer.Option(300, help="Seconds to wait for every node to be ready."),
    provider_name: str = typer.Option(
        None, "--provider", help="qemu, docker or vagrant (overrides the topology's)."
    ),
    engine: str = typer.Option(
        None, "--engine", help="docker provider: vm (labctl's Docker host VM, the default) or "
        "local (the engine at DOCKER_HOST); also LABCTL_DOCKER_ENGINE."
    ),
) -> None:
    """Start the lab described by TOPOLOGY and wait until every RDMA device is ACTIVE."""
    from labctl.cli.status import print_status

    options = lifecycle.UpOptions(accel=accel, mirror=mirror, timeout=timeout,
                                  provider=provider_name, engine=engine)
    options.check()
    with progress_reporter(f"up {topology.name}") as progress:
        result = lifecycle.up(topology, options, progress)
    lab = result.lab
    if result.repaired:
        console.print(f"[bold green]lab {lab.name}: restarted {', '.join(result.repaired)}[/]"
                      f" in {result.seconds:.1f} s")
        print_status(result.labdir, live=False)
        return
    console.print(f"[bold green]lab {lab.name} is up[/] in {result.seconds:.1f} s")
    print_status(result.labdir, live=False)
    console.print(
        f"next: `labctl run pingpong`, `labctl exec {lab.nodes[0].name} -- ibv_devinfo`,"
        f" `labctl down`"
    )


def register(app: typer.Typer) -> None:
    app.command()(up)
