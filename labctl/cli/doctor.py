"""`labctl doctor`: what this host can run (qemu nodes, container nodes) and what to do.

Checks, each with a verdict and a hint:
  qemu tools, KVM                        the qemu provider (TCG works everywhere)
  KSM                                    whether qemu nodes share their identical pages
  host kernel RDMA, rdma_rxe loadable    can containers on this kernel get Soft-RoCE at all
  per-netns rxe (functional probe)       two netns, a veth, one rxe each, a short RC pingpong
  netns mode, memlock                    what container nodes rely on
  Docker engine (local)                  the docker provider with `up --engine local`
  Docker host VM                         the docker provider's default engine; when it runs,
                                         the same probe runs inside it
  Docker host VMs by name (multi-host)   each running one: engine, the per-netns probe, and
                                         the swarm ports towards the others (docs/multi-host.md)
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import resource
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from labctl import bounded
from labctl.cli.common import console
from labctl.errors import LabctlError

OK, NO, WARN, SKIP = "ok", "no", "warn", "skipped"


@dataclass
class Check:
    name: str
    result: str  # ok | no | warn | skipped
    detail: str
    todo: str = ""


def kernel_config() -> dict[str, str]:
    """The running kernel's build config (/proc/config.gz or /boot/config-RELEASE)."""
    text = ""
    try:
        text = gzip.decompress(Path("/proc/config.gz").read_bytes()).decode()
    except OSError:
        try:
            text = Path(f"/boot/config-{platform.release()}").read_text()
        except OSError:
            return {}
    config = {}
    for line in text.splitlines():
        if line.startswith("CONFIG_"):
            key, _, value = line.partition("=")
            config[key] = value
        elif line.startswith("# CONFIG_") and line.endswith(" is not set"):
            config[line[2:].split()[0]] = "n"
    return config


def check_qemu() -> list[Check]:
    tools = {"qemu-system-x86_64": "qemu-system-x86", "qemu-img": "qemu-utils",
             "mmdebstrap": "mmdebstrap", "mkfs.ext4": "e2fsprogs", "ssh": "openssh-client"}
    missing = sorted({pkg for tool, pkg in tools.items() if shutil.which(tool) is None})
    checks = [Check("qemu tools", NO if missing else OK,
                    f"missing: {', '.join(missing)}" if missing else "qemu, qemu-img, mmdebstrap,"
                    " mkfs.ext4, ssh found",
                    f"apt-get install {' '.join(missing)}" if missing else "")]
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        checks.append(Check("KVM", WARN, "/dev/kvm is not usable: nodes run under TCG (slower)",
                            "enable virtualization (or nested virtualization) for this host"))
    else:
        from labctl.images.builder import cached_image
        from labctl.images.recipes import recipe
        from labctl.providers.accel import kvm_works

        image = cached_image(recipe("trixie"))
        if image is None:
            checks.append(Check("KVM", WARN, "/dev/kvm exists; not probed (no node image yet)",
                                "`labctl image build`, then doctor again"))
        elif kvm_works(image.kernel):
            checks.append(Check("KVM", OK, "a guest kernel boots under KVM"))
        else:
            checks.append(Check("KVM", WARN, "/dev/kvm exists but a guest does not run on it: "
                                "nodes run under TCG (slower, works)", ""))
    return checks


KSM = Path("/sys/kernel/mm/ksm")


def check_ksm(ksm: Path = KSM) -> Check:
    """qemu marks guest RAM mergeable; the host merges it only while ksmd runs. Nodes boot
    the same kernel and image, so a four-node lab measured 859 MiB of host memory with KSM
    off and 470 MiB with it on (docs/performance.md). It is a host-wide setting with a CPU
    cost, so doctor only says so: labctl never changes it."""
    try:
        run = (ksm / "run").read_text(encoding="ascii").strip()
        sharing = int((ksm / "pages_sharing").read_text(encoding="ascii"))
    except OSError:
        return Check("KSM", SKIP, "this kernel has no KSM (CONFIG_KSM)")
    except ValueError:
        return Check("KSM", SKIP, f"{ksm}/pages_sharing holds no number")
    if run == "1":
        return Check("KSM", OK, f"on: {sharing * 4096 // 2**20} MiB of pages shared now")
    return Check("KSM", WARN, "off: every qemu node keeps its own copy of the pages it "
                 "shares with the others (kernel, libraries)",
                 f"for labs of several nodes: echo 1 > {ksm}/run (host-wide; a four-node "
                 "lab then needs about half the memory, docs/performance.md)")


def check_host_rdma() -> tuple[list[Check], bool]:
    """Host kernel RDMA; True when the per-netns probe is worth running here."""
    config = kernel_config()
    release = platform.release()
    checks = []
    loaded = Path("/sys/module/rdma_rxe").is_dir()
    rxe = config.get("CONFIG_RDMA_RXE", "")
    modules = config.get("CONFIG_MODULES", "")
    if loaded or rxe == "y":
        checks.append(Check("host kernel RDMA", OK, f"{release}: rdma_rxe is "
                            + ("loaded" if loaded else "built in")))
        usable = True
    elif config and (config.get("CONFIG_INFINIBAND", "n") == "n" or rxe in ("", "n")):
        why = "no InfiniBand/RDMA core (CONFIG_INFINIBAND)" if config.get(
            "CONFIG_INFINIBAND", "n") == "n" else "no Soft-RoCE (CONFIG_RDMA_RXE)"
        loading = "" if modules == "y" else " and cannot load modules (CONFIG_MODULES unset)"
        checks.append(Check("host kernel RDMA", NO, f"{release} has {why}{loading}: "
                            "containers on this kernel cannot have RDMA devices",
                            "use the Docker host VM (docker labs use it by default) or the "
                            "qemu provider"))
        usable = False
    else:
        probe = subprocess.run(["modprobe", "-n", "rdma_rxe"], capture_output=True, text=True,
                               check=False) if shutil.which("modprobe") else None
        if probe is not None and probe.returncode == 0:
            checks.append(Check("host kernel RDMA", OK, f"{release}: rdma_rxe is loadable"))
            usable = True
        else:
            checks.append(Check("host kernel RDMA", NO, f"{release}: rdma_rxe not found",
                                "install the kernel's extra modules, or use the Docker host VM"))
            usable = False
    mode = ""
    if usable and shutil.which("rdma"):
        mode = subprocess.run(["rdma", "system", "show"], capture_output=True, text=True,
                              check=False).stdout.strip()
    checks.append(Check("netns mode (host)", OK if "shared" in mode else SKIP,
                        mode or "no RDMA subsystem on this kernel",
                        "" if not mode or "shared" in mode else
                        "`rdma system set netns shared` (exclusive mode does not confine rxe "
                        "on 7.x, see docs/docker.md)"))
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    shown = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft // 1024} KiB"
    checks.append(Check("memlock (this shell)", OK if soft == resource.RLIM_INFINITY else WARN,
                        f"{shown}; container nodes get --ulimit memlock=-1 regardless",
                        "" if soft == resource.RLIM_INFINITY else
                        "for RDMA programs run directly here: ulimit -l unlimited"))
    return checks, usable


def check_host_probe(usable: bool) -> Check:
    if not usable:
        return Check("per-netns rxe (host)", SKIP, "the host kernel has no Soft-RoCE")
    if os.geteuid() != 0 or not shutil.which("ibv_rc_pingpong"):
        return Check("per-netns rxe (host)", SKIP, "needs root and ibverbs-utils",
                     "run doctor as root with ibverbs-utils installed")
    from labctl.dockerhost.engine import Engine, local_base_url

    result = Engine("local", local_base_url()).helper("probe", timeout=90)
    return Check("per-netns rxe (host)", OK if result["ok"] else NO, str(result["detail"]),
                 "" if result["ok"] else "this kernel predates per-netns rxe (7.2+ works): "
                 "use the Docker host VM")


def check_docker() -> list[Check]:
    from labctl.dockerhost.engine import Engine, local_base_url

    checks = []
    if shutil.which("docker") is None:
        checks.append(Check("docker CLI", NO, "not installed (labctl runs `docker exec`)",
                            "apt-get install docker-cli (or docker.io)"))
    else:
        checks.append(Check("docker CLI", OK, shutil.which("docker") or ""))
    local = Engine("local", local_base_url())
    if local.reachable():
        checks.append(Check("Docker engine (local)", OK, f"answers at {local.base_url}"))
    else:
        checks.append(Check("Docker engine (local)", NO, f"nothing answers at {local.base_url}",
                            "not needed: docker labs use the Docker host VM"))
    return checks


def check_vm() -> list[Check]:
    from labctl.dockerhost.engine import Engine
    from labctl.dockerhost.vm import DockerHostVM

    vm = DockerHostVM()
    if not vm.running():
        return [Check("Docker host VM", WARN, "not running (docker labs start it on demand)",
                      "`labctl docker-host up`, then `labctl doctor` probes rxe inside it")]
    engine = Engine("vm", vm.base_url)
    if not engine.reachable():
        return [Check("Docker host VM", NO, "running, but its engine does not answer",
                      "`labctl docker-host up` reconnects; else `docker-host down` and `up`")]
    try:
        facts = engine.helper("facts")
        probe = engine.helper("probe", timeout=120)
    except (OSError, subprocess.SubprocessError, LabctlError) as exc:  # e.g. no ssh on PATH
        message = exc.message if isinstance(exc, LabctlError) else str(exc)
        return [Check("Docker host VM", NO, f"running, but cannot be asked: {message}",
                      "`labctl doctor` again once ssh works; else `docker-host down` and `up`")]
    checks = [Check("Docker host VM", OK, f"engine at {vm.base_url}, kernel {facts['kernel']}, "
                    f"rdma_rxe {'loaded' if facts['rdma_rxe'] else 'missing'}, siw "
                    f"{'loaded' if facts['siw'] else 'missing'}, netns {facts['netns_mode']}, "
                    f"RDMA CM device {facts['rdma_cm'] or '?'}")]
    checks.append(Check("per-netns rxe (VM)", OK if probe["ok"] else NO, str(probe["detail"]),
                        "" if probe["ok"] else "the VM's kernel should pass: report this"))
    return checks


def _in_vm(vm: Any, script: str, args: list[str]) -> dict[str, Any]:
    from labctl.dockerhost.engine import last_line

    proc = vm.run(["python3", "-", *args], input=script, timeout=180)
    try:  # its last line: one JSON object, read bounded (the VM runs others' containers)
        answer = bounded.load_object(last_line(proc.stdout), limit=bounded.NODE_REPLY_BYTES)
    except bounded.BoundedError:
        raise LabctlError(f"{args[0] if args else 'check'} in {vm.title} failed: "
                          f"{(proc.stderr.strip() or proc.stdout.strip())[-2000:]}") from None
    return answer


def check_hosts() -> list[Check]:
    """The named Docker host VMs of multi-host labs: each engine, rxe per netns in each,
    and the swarm ports (2377/tcp, 7946/tcp+udp, 4789/udp) from each to the others."""
    from importlib import resources

    from labctl.dockerhost.engine import helper_source
    from labctl.dockerhost.vm import DockerHostVM, vm_names

    vms = [DockerHostVM(n) for n in vm_names() if n != "default"]
    running = [vm for vm in vms if vm.running()]
    checks = [Check(f"Docker host {vm.name}", WARN, "stopped",
                    f"`labctl docker-host up --name {vm.name}`")
              for vm in vms if vm not in running]
    portcheck = resources.files("labctl.dockerhost").joinpath("portcheck.py").read_text()
    for vm in running:
        name = f"Docker host {vm.name}"
        if not vm.engine_answers():
            checks.append(Check(name, NO, "running, but its engine does not answer",
                                f"`labctl docker-host up --name {vm.name}` reconnects"))
            continue
        checks.append(Check(name, OK, f"engine at {vm.base_url}, address {vm.host_address}"))
        peers = [o.host_address for o in running if o is not vm and o.host_address]
        try:
            probe = _in_vm(vm, helper_source(), ["probe"])
            ports = _in_vm(vm, portcheck, peers) if peers else {}
        except (OSError, subprocess.SubprocessError, LabctlError) as exc:
            message = exc.message if isinstance(exc, LabctlError) else str(exc)
            checks.append(Check(f"per-netns rxe ({vm.name})", NO, message,
                                "`labctl doctor` again once ssh works"))
            continue
        checks.append(Check(f"per-netns rxe ({vm.name})", OK if probe.get("ok") else NO,
                            str(probe.get("detail", "")),
                            "" if probe.get("ok") else "the VM's kernel should pass: report"))
        for peer, found in ports.items():
            blocked = [p for p, v in found.items() if v.startswith("blocked")]
            checks.append(Check(
                f"swarm ports {vm.name} -> {peer}", NO if blocked else OK,
                ", ".join(f"{p} {v}" for p, v in found.items()),
                f"open {', '.join(blocked)} between the hosts" if blocked else ""))
    return checks


def verdicts(checks: list[Check]) -> list[dict[str, Any]]:
    """Per provider (and docker engine): works, available (starts on demand) or no."""
    by_name = {c.name: c for c in checks}
    root = os.geteuid() == 0
    qemu_ok = by_name["qemu tools"].result == OK and root
    qemu_why = "" if qemu_ok else "needs " + " and ".join(
        w for w, missing in (("root", not root),
                             ("the qemu tools", by_name["qemu tools"].result != OK)) if missing)
    local_ok = (by_name["Docker engine (local)"].result == OK
                and by_name["per-netns rxe (host)"].result == OK)
    vm_probe = by_name.get("per-netns rxe (VM)")
    if vm_probe is not None and vm_probe.result == OK:
        vm = ("works", "rxe works in the running Docker host VM")
    elif qemu_ok and vm_probe is None:
        vm = ("available", "the Docker host VM starts on demand")
    elif qemu_ok:
        vm = ("no", "the Docker host VM runs but its rxe probe failed")
    else:
        vm = ("no", f"the Docker host VM {qemu_why}")
    return [
        {"provider": "qemu", "engine": None, "verdict": "works" if qemu_ok else "no",
         "detail": "one qemu VM per node" if qemu_ok else qemu_why},
        {"provider": "docker", "engine": "vm", "verdict": vm[0], "detail": vm[1]},
        {"provider": "docker", "engine": "local", "verdict": "works" if local_ok else "no",
         "detail": "containers on this host's engine and kernel" if local_ok else
         "needs a local Docker engine and a host kernel that passes the per-netns probe"},
    ]


def doctor(
    as_json: bool = typer.Option(
        False, "--json",
        help="Print JSON: checks, a verdict per provider, usable (docs/json.md)."),
) -> None:
    """Check this host for the qemu and docker providers; say what works and what to do.

    Exit 1 when no provider can run labs on this host."""
    checks = check_qemu()
    checks.append(check_ksm())
    rdma_checks, usable = check_host_rdma()
    checks += rdma_checks
    checks.append(check_host_probe(usable))
    checks += check_docker()
    checks += check_vm()
    checks += check_hosts()
    providers = verdicts(checks)
    any_works = any(p["verdict"] != "no" for p in providers)
    if as_json:
        print(json.dumps({"checks": [asdict(c) for c in checks], "providers": providers,
                          "usable": any_works}, indent=2))
    else:
        table = Table(title="labctl doctor")
        for column in ("check", "result", "detail", "what to do"):
            table.add_column(column)
        colors = {OK: "green", NO: "red", WARN: "yellow", SKIP: "dim"}
        for check in checks:
            table.add_row(check.name, f"[{colors[check.result]}]{check.result}[/]",
                          check.detail, check.todo)
        console.print(table)
        for p in providers:
            what = p["provider"] + (f" provider, engine {p['engine']}" if p["engine"]
                                    else " provider")
            console.print(f"{what}: [bold]{p['verdict']}[/] ({p['detail']})")
        if not usable:
            console.print("This host's kernel cannot do RDMA, so container nodes cannot run on"
                          " it directly: docker labs run in the Docker host VM (the lab kernel"
                          " plus a Docker engine), which `labctl up` starts when needed.")
        if any_works:
            console.print("[bold green]labctl can run labs on this host[/]: "
                          + ", ".join(_name(p) for p in providers if p["verdict"] != "no"))
        else:
            console.print("[bold red]no provider can run labs on this host[/]; see the"
                          " checks above")
    if not any_works:
        raise typer.Exit(1)


def _name(verdict: dict[str, Any]) -> str:
    return verdict["provider"] + (f" (engine {verdict['engine']})" if verdict["engine"] else "")


def register(app: typer.Typer) -> None:
    app.command()(doctor)
