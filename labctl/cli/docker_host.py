"""`labctl docker-host up|down|status|exec`: the VM that runs the Docker engine for labs.

Docker labs start it on demand and leave it running for the next lab; these commands
manage it explicitly (see docs/docker.md).
"""

from __future__ import annotations

import json
import os
import time

import typer

from labctl.cli.common import console, int_range, progress_reporter, seconds
from labctl.cli.complete import choice_metavar, choices
from labctl.cli.up import ACCELS
from labctl.errors import LabctlError, UsageError

docker_host_app = typer.Typer(
    help="The Docker host VM: a qemu VM with the lab kernel and a Docker engine.",
    no_args_is_help=True,
)


@docker_host_app.command()
def up(
    memory: int = typer.Option(None, help="MiB of VM RAM (default 1024).",
                               callback=int_range("--memory", 256, 65536)),
    cpus: int = typer.Option(None, help="Virtual CPUs (default 2 under KVM, 1 under TCG).",
                             callback=int_range("--cpus", 1, 64)),
    accel: str = typer.Option("auto", help="qemu accelerator: auto (probe KVM), kvm or tcg.",
                              metavar=choice_metavar(*ACCELS), autocompletion=choices(*ACCELS)),
    mirror: str = typer.Option(None, help="Debian mirror URL for the image build."),
    timeout: float = typer.Option(600, help="Seconds to wait for the VM and its engine.",
                                  callback=seconds("timeout")),
) -> None:
    """Start the Docker host VM and its engine (a no-op when they run)."""
    from labctl.dockerhost.vm import DEFAULT_CPUS, DEFAULT_MEMORY_MIB, DockerHostVM

    if accel not in ACCELS:
        raise UsageError(f"--accel must be auto, kvm or tcg (got {accel!r})")
    vm = DockerHostVM()
    started = time.monotonic()
    with progress_reporter("docker-host up") as progress:
        timings = vm.up(progress, memory_mib=memory or DEFAULT_MEMORY_MIB,
                        cpus=cpus or DEFAULT_CPUS, accel=accel, mirror=mirror, timeout=timeout)
    if timings.get("already_running"):
        console.print(f"the Docker host VM is already running; engine at {vm.base_url}")
        if memory or cpus:
            console.print("(--memory/--cpus apply at the next start: `labctl docker-host down`"
                          " first)")
        return
    figures = ", ".join(f"{k.removesuffix('_seconds')} {v} s" for k, v in timings.items())
    console.print(f"[bold green]Docker host VM is up[/] in {time.monotonic() - started:.1f} s"
                  f" ({figures}); engine at {vm.base_url}")
    console.print(f"use it: `docker -H {vm.base_url} ps`, or "
                  f"docker.DockerClient(base_url={vm.base_url!r})")


@docker_host_app.command()
def down(
    force: bool = typer.Option(False, help="Stop it even if docker labs still use it."),
) -> None:
    """Stop the Docker host VM (its imported images stay in labctl's cache)."""
    from labctl.dockerhost.vm import DockerHostVM

    users = _labs_using_vm()
    if users and not force:
        raise LabctlError(f"docker labs use the Docker host VM: {', '.join(users)}",
                          hint="`labctl down --lab NAME` for each, or --force")
    removed = DockerHostVM().down()
    console.print("Docker host VM removed: " + ", ".join(removed) if removed
                  else "the Docker host VM is not running; nothing to remove")


@docker_host_app.command()
def status(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Show whether the Docker host VM and its engine run, and what they hold."""
    from labctl.dockerhost.vm import DockerHostVM

    info = DockerHostVM().status()
    info["labs"] = _labs_using_vm()
    if as_json:
        print(json.dumps(info, indent=2))
    else:
        for key, value in info.items():
            shown = ", ".join(map(str, value)) if isinstance(value, list) else value
            console.print(f"{key:16} {shown}")
    if not info["running"]:
        raise typer.Exit(1)


@docker_host_app.command("exec")
def exec_command(
    command: list[str] = typer.Argument(None, help="Command and arguments (after --)."),
) -> None:
    """Run COMMAND in the Docker host VM as root (a shell when none is given)."""
    from labctl.dockerhost.vm import VM_NODE, DockerHostVM
    from labctl.lab import ssh

    vm = DockerHostVM()
    if not vm.running():
        raise LabctlError("the Docker host VM is not running", hint="`labctl docker-host up`")
    argv = ssh.ssh_argv(vm.labdir.ssh_config, VM_NODE, command or [], tty=not command)
    os.execvp(argv[0], argv)


def _labs_using_vm() -> list[str]:
    from labctl.lab.labdir import LabDir, running_labs
    from labctl.lab.state import CorruptStateError

    users = []
    for name in running_labs():
        try:
            state = LabDir(name).load_state()
        except CorruptStateError:
            continue  # its `down` works without it; it cannot tell whether it uses the VM
        if state.provider == "docker" and state.engine and state.engine.kind == "vm":
            users.append(name)
    return users


def register(app: typer.Typer) -> None:
    app.add_typer(docker_host_app, name="docker-host")
