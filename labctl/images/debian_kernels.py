"""Debian kernel packages as node kernels (the topology's `kernel: debian:VERSION`).

VERSION names a kernel of the node image's own apt sources (its suite, its updates and
security suites, and the suite its kernel comes from): a series (`6.12`, the newest
6.12.x there), an upstream version (`6.12.57`) or a release as `uname -r` says it
(`6.12.57+deb13-amd64`). The package is fetched once with apt, under a private apt
configuration of its own (the image's sources and keyring, read from its root disk; the
host's apt setup is neither read nor changed), unpacked with `dpkg-deb -x` (no
maintainer script runs) into `kernels/debian/RELEASE_VERSION/` of the cache, a folder as
`make modules_install` leaves it, which the path-kernel code (labctl.images.kernels)
then serves as any other. Everything is made in a temporary folder beside its place and
renamed in: a fetch cut short leaves nothing that looks whole.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from labctl import hostproc, locks, safefs
from labctl.data.recipes import node_recipe
from labctl.errors import LabctlError, UsageError
from labctl.images.builder import Image, build_image
from labctl.images.kernels import find_kernel, kernels_root
from labctl.paths import cache_root
from labctl.progress import Progress
from labctl.topology.kernelsource import DEBIAN_HINT, DEBIAN_PREFIX, DEBIAN_VERSION_RE
from labctl.topology.resolved import Lab

PREFIX = DEBIAN_PREFIX
VERSION_RE = DEBIAN_VERSION_RE
# A kernel image package of the archive (not -dbg, -unsigned, -rt, -cloud).
PACKAGE_RE = re.compile(r"^linux-image-(?P<release>(?P<upstream>[0-9]+\.[0-9]+(\.[0-9]+)?)"
                        r"(-[0-9]+)?(\+deb[0-9]+)?-amd64)$")
PACKAGE_VERSION_RE = re.compile(r"^[0-9A-Za-z.+~:-]{1,64}$")
SOURCE_RE = re.compile(r"^deb (?P<url>https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?)"
                       r" (?P<suite>[a-z0-9-]{1,40})(?P<components>( [a-z0-9-]{1,40}){1,4})$")
HINT = DEBIAN_HINT
# trixie's debian-archive-keyring: .pgp, with .gpg a link to it (not followed by debugfs)
KEYRINGS = ("/usr/share/keyrings/debian-archive-keyring.pgp",
            "/usr/share/keyrings/debian-archive-keyring.gpg")
APT_SECONDS = 900.0  # a whole fetch: indexes and a 100 MiB package on a slow link
INDEX_MAX_AGE = 24 * 3600.0  # the apt indexes are fetched again after a day
FILE_BYTES = 4 << 20  # sources.list, the keyring


class DebianKernelError(UsageError):
    """A debian: value that names no kernel of the image's sources (exit 2)."""


def is_debian(text: str) -> bool:
    return text.startswith(PREFIX)


def check_version(text: str) -> str:
    """The VERSION of `debian:VERSION`, checked strictly (it reaches apt)."""
    version = text.removeprefix(PREFIX)
    if not VERSION_RE.fullmatch(version):
        raise DebianKernelError(f"{text[:80]!r} is not a Debian kernel version", hint=HINT)
    return version


@dataclass(frozen=True)
class Candidate:
    package: str  # linux-image-RELEASE
    release: str  # what `uname -r` says
    upstream: str  # 6.12.57

    def sort_key(self) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"[0-9]+", self.release))


def candidates(names: list[str]) -> list[Candidate]:
    """The kernel image packages among apt's package names."""
    found = []
    for name in names:
        match = PACKAGE_RE.fullmatch(name.strip())
        if match:
            found.append(Candidate(match[0], match["release"], match["upstream"]))
    return found


def choose(version: str, found: list[Candidate]) -> Candidate:
    """The newest package that VERSION names; DebianKernelError listing what there is."""
    release = version if version.endswith("-amd64") else f"{version}-amd64"
    matching = [c for c in found if c.release == release or c.upstream == version
                or c.upstream.startswith(version + ".")]
    if matching:
        return max(matching, key=Candidate.sort_key)
    raise DebianKernelError(f"debian:{version}: the node image's apt sources have no such "
                            f"kernel (they have {series_list(found)})", hint=HINT)


def series_list(found: list[Candidate]) -> str:
    """Each series there is with its newest release: `6.12 (6.12.118+deb13-amd64), ...`."""
    newest: dict[str, Candidate] = {}
    for cand in found:
        series = ".".join(cand.upstream.split(".")[:2])
        if series not in newest or cand.sort_key() > newest[series].sort_key():
            newest[series] = cand
    ordered = sorted(newest.items(), key=lambda item: item[1].sort_key())
    return ", ".join(f"{s} ({c.release})" for s, c in ordered) or "none"


def parse_sources(text: str, kernel_suite: str) -> list[str]:
    """The image's `deb` lines, checked, plus its kernel suite's (trixie-backports) on the
    first line's archive when the image's own sources.list does not name it."""
    lines = []
    for raw in text.splitlines():
        line = " ".join(raw.split())
        if not line.startswith("deb "):
            continue
        if not SOURCE_RE.fullmatch(line):
            raise LabctlError(f"the node image's apt sources have a line labctl does not "
                              f"take: {line[:120]!r}",
                              hint="rebuild the image (`labctl image build --force`)")
        lines.append(line)
    if not lines:
        raise LabctlError("the node image has no apt sources (/etc/apt/sources.list)",
                          hint="rebuild the image (`labctl image build --force`)")
    suites = {line.split()[2] for line in lines}
    if kernel_suite not in suites:
        first = SOURCE_RE.fullmatch(lines[0])
        assert first is not None
        lines.append(f"deb {first['url']} {kernel_suite} main")
    return lines


def debian_root() -> Path:
    return kernels_root() / "debian"


def _folder_name(release: str, package_version: str) -> str:
    """RELEASE_PKGVERSION (an epoch's ':' written '%')."""
    return f"{release}_{package_version.replace(':', '%')}"


def package_version_of(folder: str) -> str | None:
    """The package version the kernel in `folder` was unpacked from, when `folder` is one
    of this cache's debian:VERSION kernels; None for any other folder."""
    path = Path(folder)
    if path.parent != debian_root():
        return None
    return path.name.partition("_")[2].replace("%", ":")


def fetch(text: str, image: Image, progress: Progress) -> Path:
    """The folder of the kernel `debian:VERSION` names, fetched and unpacked the first
    time (under a lock: a second `up` waits for the first)."""
    version = check_version(text)
    root = debian_root()
    cache_root().mkdir(parents=True, exist_ok=True)
    safefs.make_dirs(root, cache_root())
    with locks.blocking_lock(root / ".lock"):
        apt = _Apt(root / f".apt-{image.path.name}", image)
        apt.refresh(progress)
        chosen = choose(version, candidates(apt.package_names()))
        package_version = apt.version(chosen.package)
        folder = root / _folder_name(chosen.release, package_version)
        if not folder.is_dir():
            progress(f"kernel debian:{version}: fetching {chosen.package} {package_version} "
                     "(once)")
            _unpack(apt, chosen.package, folder)
        return folder


class _Apt:
    """apt-get and apt-cache on a configuration of their own under `path`."""

    def __init__(self, path: Path, image: Image) -> None:
        self.path = path
        self.image = image
        self.env = {**os.environ, "APT_CONFIG": str(path / "apt.conf"), "LC_ALL": "C"}

    def refresh(self, progress: Progress) -> None:
        stamp = self.path / "updated"
        try:
            fresh = time.time() - stamp.stat().st_mtime < INDEX_MAX_AGE
        except OSError:
            fresh = False
        if fresh:
            return
        progress("reading the Debian kernels of the image's apt sources")
        for sub in ("lists/partial", "cache/archives/partial", "etc"):
            (self.path / sub).mkdir(parents=True, exist_ok=True)
        keyring = self.path / "etc/keyring.gpg"
        keyring.write_bytes(_image_keyring(self.image))
        sources = parse_sources(_image_file(self.image, "/etc/apt/sources.list").decode(
            errors="replace"), str(self.image.manifest.get("kernel_suite", "")))
        (self.path / "etc/sources.list").write_text("".join(
            line.replace("deb ", f"deb [signed-by={keyring}] ", 1) + "\n" for line in sources))
        (self.path / "apt.conf").write_text(
            f'Dir::Etc::sourcelist "{self.path}/etc/sources.list";\n'
            'Dir::Etc::sourceparts "/nonexistent";\n'
            'Dir::Etc::preferences "/nonexistent";\n'
            'Dir::Etc::preferencesparts "/nonexistent";\n'
            f'Dir::State::Lists "{self.path}/lists";\n'
            f'Dir::Cache "{self.path}/cache";\n'
            'Dir::State::status "/dev/null";\n'
            'APT::Architecture "amd64";\nAPT::Architectures "amd64";\n'
            'Acquire::Languages "none";\nAcquire::http::Timeout "60";\n'
            'Acquire::Retries "2";\n'
            # the downloads land in labctl's root-owned cache: apt's _apt user cannot
            'APT::Sandbox::User "root";\n')
        self.run("apt-get", "update", "-qq", what="apt-get update (the image's apt sources)")
        stamp.touch()

    def run(self, *argv: str, what: str, cwd: Path | None = None) -> str:
        return hostproc.run(list(argv), env=self.env, cwd=str(cwd or self.path),
                            timeout=APT_SECONDS, what=what, limit=16 << 20,
                            hint="check that Debian's archive is reachable from this host",
                            missing_hint="apt-get install apt").stdout

    def package_names(self) -> list[str]:
        return self.run("apt-cache", "pkgnames", "linux-image-",
                        what="apt-cache pkgnames").splitlines()

    def version(self, package: str) -> str:
        """The candidate version apt would download."""
        out = self.run("apt-cache", "policy", package, what=f"apt-cache policy {package}")
        match = re.search(r"^\s*Candidate:\s*(\S+)\s*$", out, re.M)
        if not match or not PACKAGE_VERSION_RE.fullmatch(match[1]) or match[1] == "(none)":
            raise DebianKernelError(f"{package} has no version to install in the node "
                                    "image's apt sources", hint=HINT)
        return match[1]


def _image_file(image: Image, path: str) -> bytes:
    """A file of the image's root disk (debugfs reads it; nothing is mounted)."""
    return hostproc.run_bytes(["debugfs", "-R", f"cat {path}", str(image.rootfs)],
                              timeout=60, limit=FILE_BYTES, what=f"debugfs (the image's {path})",
                              missing_hint="apt-get install e2fsprogs")


def _image_keyring(image: Image) -> bytes:
    for path in KEYRINGS:
        data = _image_file(image, path)
        if len(data) > 64:  # a link reads as nothing
            return data
    raise LabctlError("the node image has no Debian archive keyring "
                      f"({KEYRINGS[0]}): apt could not check what it downloads",
                      hint="rebuild the image (`labctl image build --force`)")


def _unpack(apt: _Apt, package: str, folder: Path) -> None:
    """Download `package` and unpack it into `folder` (made whole or not at all)."""
    work = Path(tempfile.mkdtemp(prefix=".new-", dir=folder.parent))
    try:
        apt.run("apt-get", "download", "-q", package, what=f"apt-get download {package}",
                cwd=work)
        debs = list(work.glob(f"{package}_*.deb"))
        if len(debs) != 1:
            raise LabctlError(f"apt-get download {package} left no package",
                              hint="try again; check that Debian's archive is reachable")
        unpacked = work / "kernel"
        hostproc.run(["dpkg-deb", "-x", str(debs[0]), str(unpacked)], timeout=APT_SECONDS,
                     what=f"dpkg-deb -x {debs[0].name}", missing_hint="apt-get install dpkg")
        # the kernel's path check reads this folder as a modules folder: refuse early
        # what would not be one (lib/modules/RELEASE and boot/vmlinuz-RELEASE)
        find_kernel(unpacked)
        os.rename(unpacked, folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def with_debian_kernels(lab: Lab, mirror: str | None, progress: Progress) -> Lab:
    """`lab` with each `debian:VERSION` kernel replaced by the folder it was unpacked in
    (fetched now when it is not in the cache), from the apt sources of the image of the
    first node on it."""
    folders: dict[str, Path] = {}
    nodes = []
    for node in lab.nodes:
        if is_debian(node.kernel):
            if node.kernel not in folders:
                image = build_image(node_recipe(node.image, node.packages), mirror,
                                    progress=progress)
                folders[node.kernel] = fetch(node.kernel, image, progress)
            node = replace(node, kernel=str(folders[node.kernel]))
        nodes.append(node)
    return replace(lab, nodes=tuple(nodes)) if folders else lab
