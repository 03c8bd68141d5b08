"""A kernel other than the image's, for the own-kernel tests: Debian's current
`linux-image-amd64` of the image's own suite (trixie: 6.12, where the image boots the
backports' 7.x), fetched with the apt sources the image was built with (read from its root
disk) and unpacked into a folder shaped as `make modules_install INSTALL_MOD_PATH=DIR`
leaves it (usr/lib/modules/RELEASE, boot/vmlinuz-RELEASE, boot/config-RELEASE)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from labctl.images.builder import Image

APT_SECONDS = 900


def image_sources(image: Image) -> str:
    """The image's /etc/apt/sources.list, read from its root disk (no mount)."""
    out = subprocess.run(["debugfs", "-R", "cat /etc/apt/sources.list", str(image.rootfs)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    lines = [line for line in out.splitlines() if line.startswith("deb ")]
    assert lines, f"no apt sources in {image.rootfs}"
    return "\n".join(lines) + "\n"


def fetch_other_kernel(image: Image, work: Path) -> Path:
    """The folder of the suite's kernel; asserts it is not the image's own."""
    apt = work / "apt"
    for sub in ("lists/partial", "cache/archives/partial", "etc"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    (apt / "etc/sources.list").write_text(image_sources(image))
    (apt / "apt.conf").write_text(
        f'Dir::Etc::sourcelist "{apt}/etc/sources.list";\n'
        'Dir::Etc::sourceparts "/nonexistent";\n'
        f'Dir::State::Lists "{apt}/lists";\nDir::Cache "{apt}/cache";\n'
        'Dir::State::status "/dev/null";\n')
    env = {**os.environ, "APT_CONFIG": str(apt / "apt.conf")}

    def apt_run(*argv: str) -> str:
        return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=apt,
                              timeout=APT_SECONDS, check=True).stdout

    apt_run("apt-get", "update", "-qq")
    depends = apt_run("apt-cache", "depends", "linux-image-amd64")
    package = next(line.split()[-1] for line in depends.splitlines()
                   if line.strip().startswith("Depends: linux-image-"))
    release = package.removeprefix("linux-image-")
    assert release != image.manifest["kernel"], "the suite's kernel is the image's"
    apt_run("apt-get", "download", "-q", package)
    (deb,) = apt.glob(f"{package}_*.deb")
    folder = work / "kernel"
    subprocess.run(["dpkg", "-x", str(deb), str(folder)], timeout=APT_SECONDS, check=True)
    deb.unlink()
    return folder
