"""Choose qemu's accelerator: KVM when it really runs a guest here, TCG otherwise.

/dev/kvm existing is not enough (on some hosts qemu aborts or hangs with it), so the probe
boots the node kernel under KVM for a few seconds and looks for its first console line.
The answer is cached per host boot.
"""

from __future__ import annotations

import os
from pathlib import Path

from labctl import hostproc
from labctl.paths import cache_root

PROBE_SECONDS = 6


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def kvm_works(kernel: Path) -> bool:
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    cache = cache_root() / "kvm-probe"
    if cache.is_file():
        boot, _, answer = cache.read_text().partition(" ")
        if boot == _boot_id():
            return answer.strip() == "yes"
    argv = [
        "qemu-system-x86_64",
        "-accel",
        "kvm",
        "-cpu",
        "host",
        "-m",
        "128",
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-serial",
        "stdio",
        "-kernel",
        str(kernel),
        "-append",
        "console=ttyS0 panic=-1 loglevel=8",
    ]
    try:
        out = hostproc.run(argv, timeout=PROBE_SECONDS, check=False, limit=1 << 20,
                           what="the KVM probe (qemu-system-x86_64 -accel kvm)").stdout
    except hostproc.HostProcessError as exc:
        if not exc.timed_out:
            raise
        out = exc.result.stdout  # a kernel that booted under KVM said so within the time
    works = "Linux version" in out
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(f"{_boot_id()} {'yes' if works else 'no'}\n")
    return works


def choose_accel(requested: str, kernel: Path) -> str:
    """`requested` is auto|kvm|tcg; auto probes."""
    if requested in ("kvm", "tcg"):
        return requested
    return "kvm" if kvm_works(kernel) else "tcg"
