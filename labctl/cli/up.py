"""`labctl up TOPOLOGY`: build or reuse the image, start the nodes, wait for RDMA."""

from __future__ import annotations

import dataclasses
import time

import typer

from labctl.cli.common import TopologyArgument, console, progress_reporter, seconds
from labctl.cli.complete import choice_metavar, choices
from labctl.errors import LabctlError, UsageError
from labctl.lab.labdir import LabDir
from labctl.providers import provider_for

# Choices of the options (shown in --help, completed); checked below, with these messages.
ACCELS = ("auto", "kvm", "tcg")
PROVIDERS = ("qemu", "docker", "vagrant")
ENGINES = ("vm", "local")


def up(
    topology: str = TopologyArgument,
    accel: str = typer.Option("auto", help="qemu accelerator: auto (probe KVM), kvm or tcg.",
                              metavar=choice_metavar(*ACCELS), autocompletion=choices(*ACCELS)),
    mirror: str = typer.Option(None, help="Debian mirror URL for image builds.", metavar="URL"),
    timeout: float = typer.Option(300, help="Seconds to wait for every node to be ready.",
                                  metavar="SECONDS", callback=seconds("timeout")),
    provider_name: str = typer.Option(
        None, "--provider", help="qemu, docker or vagrant (overrides the topology's).",
        metavar=choice_metavar(*PROVIDERS), autocompletion=choices(*PROVIDERS),
    ),
    engine: str = typer.Option(
        None, "--engine", help="docker provider: vm (labctl's Docker host VM) or local.",
        metavar=choice_metavar(*ENGINES), autocompletion=choices(*ENGINES),
    ),
) -> None:
    """Start the lab described by TOPOLOGY and wait until every RDMA device is ACTIVE."""
    from labctl.cli.status import print_status
    from labctl.topology.catalog import find_topology
    from labctl.topology.load import load_lab

    if accel not in ACCELS:
        raise UsageError(f"--accel must be auto, kvm or tcg (got {accel!r})")
    lab = load_lab(find_topology(topology))
    options = dict(lab.provider_options)
    options["accel"] = accel
    if mirror:
        options["mirror"] = mirror
    if engine is not None:
        if engine not in ENGINES:
            raise UsageError(f"--engine must be vm or local (got {engine!r})")
        options["engine"] = engine
    if provider_name is not None:
        if provider_name not in PROVIDERS:
            raise UsageError(f"--provider must be qemu, docker or vagrant (got {provider_name!r})")
        lab = dataclasses.replace(lab, provider=provider_name)
    lab = dataclasses.replace(lab, provider_options=options)
    labdir = LabDir(lab.name)
    started = time.monotonic()
    with labdir.locked("up"):
        if labdir.exists():
            _repair_or_refuse(labdir, timeout)
            return
        provider = provider_for(lab, labdir)
        provider.check_host()
        labdir.create(lab)
        try:
            with progress_reporter(f"up {lab.name}") as progress:
                provider.create(progress)
                provider.wait_ready(timeout, progress)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | LabctlError):
                raise
            raise LabctlError(
                f"up failed: {exc!r}", hint=f"`labctl down --lab {lab.name}` removes what was made"
            ) from exc
    console.print(f"[bold green]lab {lab.name} is up[/] in {time.monotonic() - started:.1f} s")
    print_status(labdir, live=False)
    console.print(
        f"next: `labctl run pingpong`, `labctl exec {lab.nodes[0].name} -- ibv_devinfo`,"
        f" `labctl down`"
    )


def _repair_or_refuse(labdir: LabDir, timeout: float) -> None:
    """`up` of a lab that is up: start again the nodes that died, or refuse."""
    from labctl.cli.status import print_status

    lab = labdir.load_lab()
    phase = labdir.load_state().get("phase")
    if phase not in ("up", "repairing"):  # the first `up` died before every node existed
        raise LabctlError(
            f"lab {lab.name} was never fully created (its `up` stopped in phase"
            f" {phase or 'start'})",
            hint=f"`labctl down --lab {lab.name}` removes what was made; then `labctl up` again",
        )
    provider = provider_for(lab, labdir)
    dead = [n.name for n in provider.nodes() if n.state in ("stopped", "absent")]
    if not dead:
        raise LabctlError(
            f"lab {lab.name} is already up ({labdir.path})",
            hint=f"`labctl down --lab {lab.name}` first, or use it as it is",
        )
    started = time.monotonic()
    with progress_reporter(f"repair {lab.name}") as progress:
        provider.repair(dead, progress)
        provider.wait_ready(timeout, progress)
    console.print(
        f"[bold green]lab {lab.name}: restarted {', '.join(dead)}[/] in "
        f"{time.monotonic() - started:.1f} s"
    )
    print_status(labdir, live=False)


def register(app: typer.Typer) -> None:
    app.command()(up)
