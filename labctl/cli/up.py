"""`labctl up TOPOLOGY`: build or reuse the image, start the nodes, wait for RDMA."""

from __future__ import annotations

import shlex

import typer

from labctl.capabilities import ACCELS, ENGINES, either, providers
from labctl.cli.common import (
    AllowHostMountOption,
    MirrorOption,
    TopologyArgument,
    console,
    err_console,
    progress_reporter,
    seconds,
)
from labctl.cli.complete import choice_metavar, choices
from labctl.cli.report import on_interrupt
from labctl.cli.safeprint import print_json
from labctl.cli.shapes import UpOutput
from labctl.cli.validate import mount_lines
from labctl.errors import UsageError
from labctl.lab import lifecycle
from labctl.lab.labs import lab_made

BOOTS = lifecycle.BOOTS


def up(
    topology: str = TopologyArgument,
    accel: str = typer.Option("auto", help="qemu accelerator: auto (probe KVM), kvm or tcg.",
                              metavar=choice_metavar(*ACCELS), autocompletion=choices(*ACCELS)),
    mirror: str = MirrorOption,
    timeout: float = typer.Option(300, help="Seconds to wait for every node to be ready.",
                                  metavar="SECONDS", callback=seconds("timeout")),
    provider_name: str = typer.Option(
        None, "--provider", help=f"{either(providers())} (overrides the topology's).",
        metavar=choice_metavar(*providers()), autocompletion=choices(*providers()),
    ),
    engine: str = typer.Option(
        None, "--engine", help="docker provider: vm (labctl's Docker host VM, the default) or "
        "local (the engine at DOCKER_HOST); also LABCTL_DOCKER_ENGINE.",
        metavar=choice_metavar(*ENGINES), autocompletion=choices(*ENGINES),
    ),
    mounts: list[str] = typer.Option(
        None, "--mount", help="Host folder in every node: SRC:DST (read-write) or SRC:DST:ro "
        "(SRC from the working directory, DST absolute in the node); repeatable.",
        metavar="SRC:DST[:ro]"),
    allow_mounts: list[str] = AllowHostMountOption,
    kernel: str = typer.Option(
        None, "--kernel", help="qemu: the kernel every node boots: image (the node image's "
        "own), debian:VERSION (a Debian kernel package: debian:6.12), or the path of a "
        "kernel build tree after `make`, or of a folder made by `make modules_install "
        "INSTALL_MOD_PATH=DIR` with the bzImage or vmlinuz in it (docs/kernel.md).",
        metavar="KERNEL"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON once the lab is up: how "
                                 "long it took and its status record (docs/json.md)."),
    name: str = typer.Option(
        None, "--name", help="Lab name instead of the topology's: the same topology can run "
        "as several labs side by side.", metavar="NAME"),
    recreate: bool = typer.Option(
        False, "--recreate", help="If the lab is up, take it down first and make it again "
        "(needed when its topology changed)."),
    boot: str = typer.Option(
        None, "--boot", help="qemu: restore (nodes restored from a saved machine, made once "
        "per image, kernel and node shape; cold where one cannot serve) or cold (every node "
        "boots); also LABCTL_BOOT; default restore.",
        metavar=choice_metavar(*BOOTS), autocompletion=choices(*BOOTS)),
    cold: bool = typer.Option(
        False, "--cold", help="qemu: every node boots its kernel (the same as --boot cold)."),
) -> None:
    """Start the lab described by TOPOLOGY and wait until every RDMA device is ACTIVE."""
    from labctl.cli.status import print_status
    from labctl.topology.catalog import find_topology

    options = lifecycle.UpOptions(accel=accel, mirror=mirror, timeout=timeout,
                                  provider=provider_name, engine=engine,
                                  mounts=tuple(mounts or ()), kernel=kernel,
                                  allow_host_mounts=tuple(allow_mounts or ()),
                                  name=name, recreate=recreate,
                                  boot=_boot_choice(boot, cold))
    options.check()
    path = find_topology(topology)
    with progress_reporter(f"up {path.stem}") as progress:  # a debian: kernel's fetch
        resolved = lifecycle.resolve(path, options, progress)
    existed = lab_made(resolved.name) and not recreate  # recreate: made anew
    on_interrupt(lambda: up_interrupted(resolved.name, shlex.quote(topology), existed))
    for line in mount_lines(resolved):  # refused here: exit 2
        (err_console if as_json else console).print(line, markup=False, soft_wrap=True)
    with progress_reporter(f"up {path.stem}") as progress:
        result = lifecycle.up(path, options, progress, resolved=resolved)
    lab = result.lab
    if as_json:  # the status as `up` prints it: the nodes' reports from when they were ready
        output: UpOutput = {"lab": lab.name, "seconds": round(result.seconds, 1),
                            "repaired": result.repaired, "restored": result.restored,
                            "status": result.status}
        print_json(output)
        return
    if result.already_up:
        console.print(f"[bold green]lab {lab.name} is already up[/] from this topology; "
                      "left as it is (`--recreate` makes it again)")
        print_status(result.status)
        return
    if result.removed:
        console.print(f"lab {lab.name}: took the running lab down first", highlight=False)
    if result.repaired:
        console.print(f"[bold green]lab {lab.name}: restarted {', '.join(result.repaired)}[/]"
                      f" in {result.seconds:.1f} s")
        print_status(result.status)
        return
    restored = result.restored
    how = (f" ({len(restored)} of {len(lab.nodes)} nodes restored from a saved machine)"
           if restored else "")
    console.print(f"[bold green]lab {lab.name} is up[/] in {result.seconds:.1f} s{how}",
                  highlight=False)
    print_status(result.status)
    # --lab in every hint: without it the commands fail as soon as a second lab is up.
    console.print(
        f"next: `labctl run pingpong --lab {lab.name}`, `labctl exec {lab.nodes[0].name}"
        f" --lab {lab.name} -- ibv_devinfo`, `labctl down --lab {lab.name}`",
        soft_wrap=True,  # commands to copy: never broken across lines
    )


def up_interrupted(name: str, topology: str, existed: bool) -> str:
    """What an interrupted `up` left of lab `name`, and the command that cleans only that."""
    down = f"`labctl down --lab {name}`"
    if not lab_made(name):
        return f"nothing of lab {name} was made" if not existed else f"lab {name} is gone"
    if existed:
        return (f"lab {name} was up before; a node being restarted may be down: "
                f"`labctl up {topology}` again repairs it, {down} removes the lab")
    return (f"lab {name} is half-made (`labctl status --lab {name}` shows what): {down} "
            "removes it and nothing else")


def register(app: typer.Typer) -> None:
    app.command()(up)


def _boot_choice(boot: str | None, cold: bool) -> str | None:
    if not cold:
        return boot
    if boot not in (None, "cold"):
        raise UsageError(f"--cold and --boot {boot} contradict each other",
                         hint="give one of them")
    return "cold"
