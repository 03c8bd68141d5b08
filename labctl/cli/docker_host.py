"""`labctl docker-host up|down|status|exec`: the VM that runs the Docker engine for labs.

Docker labs start it on demand and leave it running for the next lab; these commands
manage it explicitly (see docs/docker.md).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import typer

from labctl.capabilities import ACCELS
from labctl.cli.common import (
    HELP_SETTINGS,
    MirrorOption,
    console,
    int_range,
    progress_reporter,
    seconds,
    wants_terminal,
)
from labctl.cli.complete import choice_metavar, choices
from labctl.cli.safeprint import print_json
from labctl.cli.shapes import DockerHostDownOutput, DockerHostUpOutput
from labctl.errors import LabctlError, UsageError

if TYPE_CHECKING:
    from labctl.dockerhost.vm import DockerHostVM

NAME_HELP = ("Which Docker host VM: `default` (the one docker labs use), or a name of your "
             "choice for the VMs of multi-host labs (docs/multi-host.md).")

docker_host_app = typer.Typer(
    context_settings=HELP_SETTINGS,
    help="The Docker host VM: a qemu VM with the lab kernel and a Docker engine.",
    no_args_is_help=True,
)


@docker_host_app.command()
def up(
    name: str = typer.Option("default", metavar="NAME", help=NAME_HELP),
    memory: int = typer.Option(None, metavar="MIB", help="MiB of VM RAM (default 1024).",
                               callback=int_range("--memory", 256, 65536)),
    cpus: int = typer.Option(None, metavar="COUNT",
                             help="Virtual CPUs (default 2 under KVM, 1 under TCG).",
                             callback=int_range("--cpus", 1, 64)),
    accel: str = typer.Option("auto", help="qemu accelerator: auto (probe KVM), kvm or tcg.",
                              metavar=choice_metavar(*ACCELS), autocompletion=choices(*ACCELS)),
    mirror: str = MirrorOption,
    timeout: float = typer.Option(600, metavar="SECONDS",
                                  help="Seconds to wait for the VM and its engine.",
                                  callback=seconds("timeout")),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (docs/json.md)."),
) -> None:
    """Start the Docker host VM and its engine (a no-op when they run)."""
    from labctl.dockerhost.vm import DEFAULT_CPUS, DEFAULT_MEMORY_MIB, DockerHostVM

    if accel not in ACCELS:
        raise UsageError(f"--accel must be auto, kvm or tcg (got {accel!r})",
                         hint="auto uses KVM when /dev/kvm is usable, else tcg")
    vm = DockerHostVM(name)
    started = time.monotonic()
    with progress_reporter("docker-host up") as progress:
        timings = vm.up(progress, memory_mib=memory or DEFAULT_MEMORY_MIB,
                        cpus=cpus or DEFAULT_CPUS, accel=accel, mirror=mirror, timeout=timeout)
    if as_json:
        record: DockerHostUpOutput = {
            "name": vm.name, "already_running": bool(timings.get("already_running")),
            "engine": vm.base_url, "host_address": (vm.host_address or None) if vm.named else None,
            "seconds": round(time.monotonic() - started, 1),
            "timings": {k: float(v) for k, v in timings.items() if k != "already_running"}}
        print_json(record)
        return
    where = f"; address {vm.host_address} on the Docker hosts' network" if vm.named else ""
    if timings.get("already_running"):
        console.print(f"{vm.title} is already running; engine at {vm.base_url}{where}")
        if memory or cpus:
            console.print("(--memory/--cpus apply at the next start: `labctl docker-host down`"
                          " first)")
        return
    figures = ", ".join(f"{k.removesuffix('_seconds')} {v} s" for k, v in timings.items())
    console.print(f"[bold green]{vm.title[0].upper()}{vm.title[1:]} is up[/] in "
                  f"{time.monotonic() - started:.1f} s ({figures}); engine at {vm.base_url}"
                  f"{where}")
    console.print(f"use it: `docker -H {vm.base_url} ps`, or "
                  f"docker.DockerClient(base_url={vm.base_url!r})")


@docker_host_app.command()
def down(
    name: str = typer.Option("default", metavar="NAME", help=NAME_HELP),
    force: bool = typer.Option(False, help="Stop it even if docker labs still use it."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (docs/json.md)."),
) -> None:
    """Stop a Docker host VM (its imported images stay in labctl's cache)."""
    from labctl.dockerhost.vm import DockerHostVM

    vm = DockerHostVM(name)
    users = _labs_using_vm(vm.name)
    if users and not force:
        raise LabctlError(f"docker labs use {vm.title}: {', '.join(users)}",
                          hint="`labctl down --lab NAME` for each, or --force")
    removed = vm.down()
    if as_json:
        done: DockerHostDownOutput = {"name": vm.name, "removed": removed}
        print_json(done)
        return
    console.print(f"{vm.title} removed: " + ", ".join(removed) if removed
                  else f"{vm.title} is not running; nothing to remove")


@docker_host_app.command()
def status(
    name: str = typer.Option("default", metavar="NAME", help=NAME_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show whether a Docker host VM and its engine run, what they hold, and the other VMs."""
    from labctl.dockerhost.vm import DockerHostVM, vm_names

    vm = DockerHostVM(name)
    info = vm.status()
    info["labs"] = _labs_using_vm(vm.name)
    # Every other VM in one line each, so one `status` shows them all.
    info["others"] = [_brief(DockerHostVM(n)) for n in vm_names() if n != vm.name]
    if as_json:
        print_json(info)
    else:
        for key, value in info.items():
            if key == "others":
                value = [" ".join(f"{k}={v}" for k, v in other.items()) for other in value]
            shown = ", ".join(map(str, value)) if isinstance(value, list) else value
            console.print(f"{key:16} {shown}")
    if not info["running"]:
        raise typer.Exit(1)


def _brief(vm: DockerHostVM) -> dict[str, str]:
    running = vm.running()
    brief = {"name": vm.name, "state": "running" if running else "stopped"}
    if vm.host_address:
        brief["host_address"] = vm.host_address
    brief["socket"] = str(vm.socket)
    return brief


@docker_host_app.command("exec")
def exec_command(
    name: str = typer.Option("default", metavar="NAME", help=NAME_HELP),
    command: list[str] = typer.Argument(None, help="Command and arguments (after --).",
                                        metavar="COMMAND..."),
) -> None:
    """Run COMMAND in the Docker host VM as root (a shell when none is given)."""
    from labctl.dockerhost.vm import VM_NODE, DockerHostVM
    from labctl.node import ssh

    vm = DockerHostVM(name)
    if not vm.running():
        raise LabctlError(f"{vm.title} is not running",
                          hint=f"`labctl docker-host up --name {vm.name}`")
    argv = ssh.ssh_argv(vm.labdir.ssh_config, VM_NODE, command or [],
                        tty=wants_terminal(command))
    os.execvp(argv[0], argv)


def _labs_using_vm(name: str = "default") -> list[str]:
    from labctl.dockerhost.hosts import labs_on_vm
    from labctl.store.labdir import LabDir, running_labs
    from labctl.store.state import CorruptStateError

    if name != "default":
        return labs_on_vm(name)
    users = []
    for name in running_labs():
        try:
            state = LabDir(name).load_state()
        except CorruptStateError:
            continue  # its `down` works without it; it cannot tell whether it uses the VM
        if state.engine and state.engine.kind == "vm":  # only container labs record one
            users.append(name)
    return users


def register(app: typer.Typer) -> None:
    app.add_typer(docker_host_app, name="docker-host")
