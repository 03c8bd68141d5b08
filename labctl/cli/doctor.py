"""`labctl doctor`: what this host can run (qemu nodes, container nodes) and what to do.

Checks, each with a verdict and a hint:
  qemu tools, KVM                        the qemu provider (TCG works everywhere)
  a line per host package                each Debian package scripts/setup.sh installs, found
                                         by what uses it (binary, library, file), with the
                                         provider, feature or tests that need it; only the
                                         qemu provider's own tools can make it `no`
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
import os
import platform
import resource
import shutil
import subprocess
from collections.abc import Callable
from ctypes.util import find_library
from dataclasses import asdict, dataclass
from glob import glob
from pathlib import Path
from typing import Any, Final, Literal

import typer
from rich.table import Table
from typing_extensions import TypedDict

from labctl import capabilities, hostproc
from labctl.cli.common import console
from labctl.cli.safeprint import print_json
from labctl.cli.shapes import ProviderVerdict
from labctl.errors import LabctlError, short_repr

OK: Final = "ok"
NO: Final = "no"
WARN: Final = "warn"
SKIP: Final = "skipped"
Result = Literal["ok", "no", "warn", "skipped"]


@dataclass
class Check:
    name: str
    result: Result
    detail: str
    todo: str = ""  # what to do about it; "" when nothing


class DoctorOutput(TypedDict):
    """`labctl doctor --json`: the checks, a verdict per provider, and whether any works."""

    checks: list[Check]
    providers: list[ProviderVerdict]
    usable: bool  # some provider works or is available here; else doctor exits 1


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


# --- host packages -------------------------------------------------------------------
# Each Debian package scripts/setup.sh installs, found by what labctl (or the tests) really
# use: the binary, the library scapy loads, the file another tool reads. `need` says what a
# missing one costs: QEMU, the qemu provider cannot run; IMAGE, node images cannot be built
# (a cached one still boots); OPTIONAL, only the feature named in `used_by`.
QEMU, IMAGE, OPTIONAL = "qemu", "image", "optional"
# A user's PATH on Debian lacks /usr/sbin, where mkfs.ext4, iptables, libvirtd, dnsmasq are.
SBIN_DIRS = (Path("/usr/sbin"), Path("/sbin"))
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")  # mmdebstrap's for Debian
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")  # apt's https transport reads it
LIBC_HEADER = Path("/usr/include/stdio.h")  # libc6-dev's: cc cannot build without it
LIBVIRT_QEMU_DRIVER = ("/usr/lib/*/libvirt/connection-driver/libvirt_driver_qemu.so",
                       "/usr/lib64/libvirt/connection-driver/libvirt_driver_qemu.so")
VAGRANT_PLUGINS_TIMEOUT = 20.0  # `vagrant plugin list` took 0.6 s here (ruby's start)
ASK_VAGRANT = "run `vagrant plugin list` to see why"


class Unprobed(Exception):
    """The probe could not tell whether the package is there (the message says why)."""

    def __init__(self, message: str, result: Result = WARN, todo: str = "") -> None:
        super().__init__(message)
        self.result, self.todo = result, todo


Probe = Callable[[], str]  # what was found (a path, a line), "" when missing


def binary(name: str) -> Probe:
    def probe() -> str:
        found = shutil.which(name)
        if found:
            return found
        for directory in SBIN_DIRS:
            candidate = directory / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
        return ""
    return probe


def library(name: str) -> Probe:
    # What scapy's libpcap binding loads, found the way it finds it.
    return lambda: find_library(name) or ""


def keyring() -> str:
    return str(KEYRING) if KEYRING.is_file() else ""


def ca_bundle() -> str:
    return str(CA_BUNDLE) if CA_BUNDLE.is_file() else ""


def libc_header() -> str:
    return str(LIBC_HEADER) if LIBC_HEADER.is_file() else ""


def libvirt_qemu_driver() -> str:
    return next((found for pattern in LIBVIRT_QEMU_DRIVER for found in sorted(glob(pattern))),
                "")


def vagrant_plugin(name: str) -> Probe:
    def probe() -> str:
        vagrant = shutil.which("vagrant")
        if vagrant is None:
            raise Unprobed("vagrant is not installed, so its plugins cannot be listed", SKIP,
                           "apt-get install vagrant vagrant-libvirt")
        try:
            # From /, as labctl runs vagrant outside a lab: no Vagrantfile here is read.
            result = hostproc.run(
                [vagrant, "plugin", "list"], cwd="/", timeout=VAGRANT_PLUGINS_TIMEOUT,
                check=False, limit=64 << 10,
                env={**os.environ, "VAGRANT_CHECKPOINT_DISABLE": "1"})
        except hostproc.HostProcessError as exc:
            if exc.timed_out:
                raise Unprobed(f"`vagrant plugin list` did not answer in "
                               f"{VAGRANT_PLUGINS_TIMEOUT:g} s", todo=ASK_VAGRANT) from None
            raise Unprobed(f"`vagrant plugin list` failed: {exc.reason}",
                           todo=ASK_VAGRANT) from None
        if result.returncode != 0:
            said = (result.stderr.strip().splitlines() or [""])[-1]
            raise Unprobed(f"`vagrant plugin list` exited {result.returncode}: "
                           f"{short_repr(said)}", todo=ASK_VAGRANT)
        # Lines such as "vagrant-libvirt (0.11.2, system)".
        return next((line.strip() for line in result.stdout.splitlines()
                     if line.split()[:1] == [name]), "")
    return probe


@dataclass(frozen=True)
class HostPackage:
    package: str  # the Debian package (scripts/setup.sh's name; the hint installs it)
    what: str  # what doctor looks for
    probe: Probe
    used_by: str  # the provider, feature or tests that need it
    need: str = OPTIONAL  # QEMU | IMAGE | OPTIONAL
    without: str = ""  # what happens without it, when more than losing `used_by`


LIBVIRT = "the vagrant provider on libvirt"
HOST_PACKAGES = (
    HostPackage("qemu-system-x86", "qemu-system-x86_64", binary("qemu-system-x86_64"),
                "the qemu provider (a VM per node) and the Docker host VM", QEMU),
    HostPackage("qemu-utils", "qemu-img", binary("qemu-img"),
                "the qemu provider (each node's disk is an overlay) and `labctl image box`",
                QEMU),
    HostPackage("openssh-client", "ssh", binary("ssh"),
                "the qemu and vagrant providers and the Docker host VM (nodes are reached "
                "over ssh)", QEMU),
    HostPackage("mmdebstrap", "mmdebstrap", binary("mmdebstrap"),
                "building node images (`labctl image build`, the first `up`)", IMAGE),
    HostPackage("e2fsprogs", "mkfs.ext4", binary("mkfs.ext4"),
                "building node images (their root filesystem) and the Docker host VM's disk",
                IMAGE),
    HostPackage("debian-archive-keyring", str(KEYRING), keyring,
                "building node images (mmdebstrap checks Debian's signatures with it)", IMAGE),
    HostPackage("zstd", "zstd", binary("zstd"),
                "building node images: the kernel uncompressed, booted directly (PVH)",
                without="nodes boot the compressed kernel, 1.4-3 s slower each "
                "(docs/performance.md)"),
    HostPackage("kmod", "depmod", binary("depmod"),
                "qemu nodes on a kernel of your own (`kernel:`, `up --kernel`): depmod and "
                "modprobe index its modules once (docs/kernel.md)"),
    HostPackage("ca-certificates", str(CA_BUNDLE), ca_bundle,
                "building node images from an https:// `--mirror` (apt checks its "
                "certificate)"),
    HostPackage("libpcap0.8", "libpcap (as scapy loads it)", library("pcap"),
                "`labctl capture --filter` (scapy compiles the BPF expression with libpcap)"),
    HostPackage("iproute2", "ip", binary("ip"),
                "docker labs with `--engine local` (the network helper runs `ip` and `rdma` "
                "here) and the tests' network namespaces"),
    HostPackage("vagrant", "vagrant", binary("vagrant"),
                "the vagrant provider, and the tests' `vagrant validate` of the Vagrantfile"),
    HostPackage("vagrant-libvirt", "`vagrant plugin list`", vagrant_plugin("vagrant-libvirt"),
                LIBVIRT),
    HostPackage("libvirt-daemon", "libvirtd", binary("libvirtd"),
                f"{LIBVIRT}: labctl starts libvirtd and virtlogd when none runs"),
    HostPackage("libvirt-daemon-driver-qemu", "libvirt's qemu driver", libvirt_qemu_driver,
                f"{LIBVIRT}: libvirt runs the nodes through it"),
    HostPackage("libvirt-clients", "virsh", binary("virsh"),
                f"{LIBVIRT}: labctl asks libvirt with virsh"),
    HostPackage("dnsmasq-base", "dnsmasq", binary("dnsmasq"),
                f"{LIBVIRT}: DHCP on the nodes' management network"),
    HostPackage("iptables", "iptables", binary("iptables"),
                f"{LIBVIRT}: libvirt's isolated networks"),
    HostPackage("tshark", "tshark", binary("tshark"),
                "the tests only: the decoder's cross-check against Wireshark "
                "(tests/unit/test_capture_tshark.py); labctl does not run it"),
    HostPackage("gcc", "gcc", binary("gcc"),
                "the tests only: building the nodes' inspector client here "
                "(tests/unit/test_verbs_helper.py); node images compile it themselves"),
    HostPackage("libc6-dev", str(LIBC_HEADER), libc_header,
                "the tests only: gcc's C library headers for the inspector client's build"),
    HostPackage("cpio", "cpio", binary("cpio"),
                "the tests only: GNU cpio reads back labctl's initramfs "
                "(tests/unit/test_cpio.py); labctl writes cpio itself"),
)


def check_package(package: HostPackage, image_cached: bool) -> Check:
    todo = f"apt-get install {package.package}"
    try:
        found = package.probe()
    except Unprobed as exc:
        return Check(package.package, exc.result, f"{exc}; needed for {package.used_by}",
                     exc.todo)
    if found:
        return Check(package.package, OK, f"{found}; for {package.used_by}")
    detail = f"missing ({package.what}): needed for {package.used_by}"
    if package.without:
        detail += f"; without it {package.without}"
    if package.need == QEMU or (package.need == IMAGE and not image_cached):
        return Check(package.package, NO, detail, todo)
    if package.need == IMAGE:
        detail += "; a node image is cached, so labs still start"
    return Check(package.package, WARN, detail, todo)


def check_host_packages(image_cached: bool) -> list[Check]:
    """"qemu tools" (what the qemu provider's verdict rests on) and a line per package."""
    lines = [check_package(p, image_cached) for p in HOST_PACKAGES]
    needed = {p.package for p in HOST_PACKAGES if p.need in (QEMU, IMAGE)}
    missing = [c.name for c in lines if c.name in needed and c.result == NO]
    if missing:
        summary = Check("qemu tools", NO, f"missing: {', '.join(missing)}",
                        f"apt-get install {' '.join(missing)}")
    else:
        unbuildable = [c.name for c in lines if c.name in needed and c.result != OK]
        summary = Check("qemu tools", OK, "qemu, qemu-img, ssh found; " + (
            f"nodes boot the cached image (building one needs {', '.join(unbuildable)})"
            if unbuildable else "node images can be built (mmdebstrap, mkfs.ext4, keyring)"))
    return [summary, *lines]


def node_image_cached() -> bool:
    from labctl.data.recipes import recipe
    from labctl.images.builder import cached_image

    return cached_image(recipe("trixie")) is not None


def check_kvm() -> Check:
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return Check("KVM", WARN, "/dev/kvm is not usable: nodes run under TCG (slower)",
                     "enable virtualization (or nested virtualization) for this host")
    from labctl.data.recipes import recipe
    from labctl.images.builder import cached_image
    from labctl.vm.accel import kvm_works

    image = cached_image(recipe("trixie"))
    if image is None:
        return Check("KVM", WARN, "/dev/kvm exists; not probed (no node image yet)",
                     "`labctl image build`, then doctor again")
    if kvm_works(image.kernel):
        return Check("KVM", OK, "a guest kernel boots under KVM")
    return Check("KVM", WARN, "/dev/kvm exists but a guest does not run on it: "
                 "nodes run under TCG (slower, works)", "")


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


RXE_MODULE = Path("/sys/module/rdma_rxe")  # there while rdma_rxe is loaded
QUICK_TIMEOUT = 10.0  # for modprobe -n and rdma, which answer at once


def _quick(argv: list[str]) -> str | None:
    """A host tool's output when it exits 0 within QUICK_TIMEOUT (a few lines: bounded),
    else None: doctor must answer even when a tool hangs."""
    try:
        result = hostproc.run(argv, timeout=QUICK_TIMEOUT, limit=64 << 10, check=False)
    except hostproc.HostProcessError:  # not installed, or hung
        return None
    return result.stdout if result.returncode == 0 else None


def check_host_rdma() -> tuple[list[Check], bool]:
    """Host kernel RDMA; True when the per-netns probe is worth running here."""
    config = kernel_config()
    release = platform.release()
    checks = []
    loaded = RXE_MODULE.is_dir()
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
        if shutil.which("modprobe") and _quick(["modprobe", "-n", "rdma_rxe"]) is not None:
            checks.append(Check("host kernel RDMA", OK, f"{release}: rdma_rxe is loadable"))
            usable = True
        else:
            checks.append(Check("host kernel RDMA", NO, f"{release}: rdma_rxe not found",
                                "install the kernel's extra modules, or use the Docker host VM"))
            usable = False
    mode = ""
    if usable and shutil.which("rdma"):
        mode = (_quick(["rdma", "system", "show"]) or "").strip()
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
    from labctl.dockerhost.engine import reply_object

    proc = vm.run(["python3", "-", *args], input=script, timeout=180)
    return reply_object(proc, vm.title, f"run {args[0] if args else 'the check'} in")


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
    portcheck = resources.files("labctl.engineside").joinpath("portcheck.py").read_text()
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


def verdicts(checks: list[Check]) -> list[ProviderVerdict]:
    """Per provider (and engine) the registry has a verdict for: works, available (starts
    on demand) or no."""
    by_name = {c.name: c for c in checks}
    found: list[ProviderVerdict] = []
    for name, host in capabilities.host_verdicts():
        verdict, detail = _verdict(host, by_name)
        found.append({"provider": name, "engine": host.engine, "verdict": verdict,
                      "detail": detail})
    return found


Verdict = Literal["works", "available", "no"]


def _verdict(host: capabilities.HostVerdict, by_name: dict[str, Check]) -> tuple[Verdict, str]:
    missing = ["root"] if host.root and os.geteuid() != 0 else []
    missing += [what for check, what in host.needs.items()
                if check not in by_name or by_name[check].result != OK]
    probe = by_name.get(host.probe) if host.probe else None
    if (probe is not None and probe.result == OK) or (not host.probe and not missing):
        return "works", host.works
    if not missing:
        return ("available", host.available) if probe is None else ("no", host.probe_failed)
    return "no", host.no or f"{host.subject}needs {' and '.join(missing)}"


def doctor(
    as_json: bool = typer.Option(
        False, "--json",
        help="Print JSON: checks, a verdict per provider, usable (docs/json.md)."),
) -> None:
    """Check this host for the qemu and docker providers; say what works and what to do.

    Exit 1 when no provider can run labs on this host."""
    checks = check_host_packages(node_image_cached())
    checks.append(check_kvm())
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
        print_json({"checks": [asdict(c) for c in checks], "providers": providers,
                    "usable": any_works})
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


def _name(verdict: ProviderVerdict) -> str:
    return verdict["provider"] + (f" (engine {verdict['engine']})" if verdict["engine"] else "")


def register(app: typer.Typer) -> None:
    app.command()(doctor)
