"""`kernel: debian:VERSION`: the version's strict syntax (it reaches apt), which package a
version names among the archive's, the image's apt sources as labctl takes them, and the
unpacking of a real .deb (made here with dpkg-deb) into the cache: whole or not at all."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from labctl.images import debian_kernels
from labctl.images.debian_kernels import (
    Candidate,
    DebianKernelError,
    candidates,
    check_version,
    choose,
    parse_sources,
    with_debian_kernels,
)
from labctl.images.kernels import KernelError, find_kernel
from labctl.topology.kernelsource import with_kernel
from labctl.topology.load import load_lab
from tests.unit.test_own_kernel import REPO, modules_folder

# `apt-cache pkgnames linux-image-` on trixie with trixie-backports, cut down
PKGNAMES = """linux-image-6.12.117+deb13-amd64
linux-image-6.12.118+deb13-amd64
linux-image-6.12.118+deb13-amd64-dbg
linux-image-6.12.118+deb13-amd64-unsigned
linux-image-6.12.118+deb13-cloud-amd64
linux-image-6.12.118+deb13-rt-amd64
linux-image-6.12.9+deb13-amd64
linux-image-7.3.4+deb13-amd64
linux-image-amd64
linux-image-amd64-dbg
linux-image-cloud-amd64
""".splitlines()
SOURCES = """deb http://archive.example/debian trixie main
deb http://archive.example/debian trixie-updates main
# a comment
deb http://security.example/debian-security trixie-security main
"""


@pytest.mark.parametrize("text", ["debian:6.12", "debian:6.12.57", "debian:6.12.57+deb13-amd64",
                                  "debian:6.1.0-37-amd64", "debian:7.3.4+deb13"])
def test_versions_labctl_takes(text: str) -> None:
    assert check_version(text) == text.removeprefix("debian:")


@pytest.mark.parametrize("text", ["debian:", "debian:6", "debian:6.12;rm -rf /",
                                  "debian:6.12 linux-image-x", "debian:-o=APT::X",
                                  "debian:6.12.57+deb13-rt-amd64", "debian:latest",
                                  "debian:6.12\n", "debian:../6.12"])
def test_malformed_versions_are_refused(text: str) -> None:
    with pytest.raises(DebianKernelError) as info:
        check_version(text)
    assert info.value.exit_code == 2 and "debian:6.12" in (info.value.hint or "")


def test_up_kernel_refuses_a_malformed_version_before_anything() -> None:
    lab = load_lab(REPO / "topologies" / "two-node.yaml")
    with pytest.raises(Exception) as info:
        with_kernel(lab, "debian:6.12;x", Path.cwd())
    assert str(info.value.args[0]).startswith("--kernel 'debian:6.12;x': ")
    kept = with_kernel(lab, "debian:6.12", Path.cwd())  # fetched later, when made
    assert {n.kernel for n in kept.nodes} == {"debian:6.12"}


def test_only_the_plain_kernel_image_packages_are_candidates() -> None:
    assert [c.release for c in candidates(PKGNAMES)] == [
        "6.12.117+deb13-amd64", "6.12.118+deb13-amd64", "6.12.9+deb13-amd64",
        "7.3.4+deb13-amd64"]


@pytest.mark.parametrize(("version", "release"), [
    ("6.12", "6.12.118+deb13-amd64"),  # the newest of the series, by number not by text
    ("6.12.117", "6.12.117+deb13-amd64"),
    ("6.12.9", "6.12.9+deb13-amd64"),
    ("6.12.117+deb13-amd64", "6.12.117+deb13-amd64"),
    ("6.12.117+deb13", "6.12.117+deb13-amd64"),
    ("7.3", "7.3.4+deb13-amd64"),
])
def test_a_version_names_the_newest_package_it_matches(version: str, release: str) -> None:
    chosen = choose(version, candidates(PKGNAMES))
    assert (chosen.package, chosen.release) == (f"linux-image-{release}", release)


@pytest.mark.parametrize("version", ["6.1", "6.12.5", "6.1.0-37-amd64", "6.121"])
def test_a_version_the_archive_lacks_is_refused_with_what_it_has(version: str) -> None:
    with pytest.raises(DebianKernelError) as info:
        choose(version, candidates(PKGNAMES))
    assert info.value.message == (
        f"debian:{version}: the node image's apt sources have no such kernel (they have "
        "6.12 (6.12.118+deb13-amd64), 7.3 (7.3.4+deb13-amd64))")
    assert info.value.exit_code == 2


def test_sort_key_orders_by_number() -> None:
    assert Candidate("", "6.12.9+deb13-amd64", "").sort_key() < Candidate(
        "", "6.12.10+deb13-amd64", "").sort_key()


def test_the_image_sources_gain_its_kernel_suite() -> None:
    assert parse_sources(SOURCES, "trixie-backports") == [
        "deb http://archive.example/debian trixie main",
        "deb http://archive.example/debian trixie-updates main",
        "deb http://security.example/debian-security trixie-security main",
        "deb http://archive.example/debian trixie-backports main"]
    assert len(parse_sources(SOURCES, "trixie")) == 3  # sid: the kernel's suite is there


@pytest.mark.parametrize("line", [
    "deb [trusted=yes] http://archive.example/debian trixie main",
    "deb file:///srv/repo trixie main",
    'deb http://archive.example/debian trixie main"\nDir "/',
    "deb http://archive.example/debian trixie main$(id)",
])
def test_image_sources_labctl_does_not_take_are_refused(line: str) -> None:
    with pytest.raises(Exception) as info:
        parse_sources(line + "\n", "trixie-backports")
    assert "apt sources have a line labctl does not take" in str(info.value.args[0])


def test_an_image_without_sources_is_refused() -> None:
    with pytest.raises(Exception, match="has no apt sources"):
        parse_sources("# nothing\n", "trixie-backports")


# --- unpacking a real package ---------------------------------------------------------


def kernel_deb(tmp_path: Path, release: str, *, kernel: bool = True) -> Path:
    """A .deb laid out as Debian's linux-image-RELEASE is (usr/lib/modules/RELEASE,
    boot/vmlinuz-RELEASE, boot/config-RELEASE), built by dpkg-deb."""
    root = tmp_path / "pkgroot"
    modules_folder(root, release)
    if not kernel:
        (root / "boot" / f"vmlinuz-{release}").unlink()
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN/control").write_text(
        f"Package: linux-image-{release}\nVersion: 1.0-1\nArchitecture: amd64\n"
        "Maintainer: test <test@example.invalid>\nDescription: test kernel\n")
    deb = tmp_path / f"linux-image-{release}_1.0-1_amd64.deb"
    subprocess.run(["dpkg-deb", "-Zgzip", "-b", str(root), str(deb)], check=True,
                   capture_output=True, timeout=60)
    shutil.rmtree(root)
    return deb


class FakeDownload(debian_kernels._Apt):
    """apt whose `download` copies a package built here (no network in unit tests);
    dpkg-deb and the kernel checks run for real."""

    def __init__(self, deb: Path) -> None:
        self.deb = deb

    def run(self, *argv: str, what: str, cwd: Path | None = None) -> str:
        assert argv[:2] == ("apt-get", "download") and cwd is not None
        shutil.copy(self.deb, cwd / self.deb.name)
        return ""


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")
def test_a_package_is_unpacked_into_a_modules_folder(tmp_path: Path) -> None:
    release = "6.12.118+deb13-amd64"
    deb = kernel_deb(tmp_path, release)
    cache = tmp_path / "cache"
    cache.mkdir()
    folder = cache / f"{release}_1.0-1"
    debian_kernels._unpack(FakeDownload(deb), f"linux-image-{release}", folder)
    files = find_kernel(folder)
    assert (files.kind, files.release) == ("modules folder", release)
    assert [p.name for p in cache.iterdir()] == [folder.name]  # no work folder left


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")
def test_a_package_that_is_no_kernel_leaves_nothing_in_the_cache(tmp_path: Path) -> None:
    release = "6.12.118+deb13-amd64"
    deb = kernel_deb(tmp_path, release, kernel=False)
    cache = tmp_path / "cache"
    cache.mkdir()
    with pytest.raises(KernelError, match=r"has the modules of .* but no kernel"):
        debian_kernels._unpack(FakeDownload(deb), f"linux-image-{release}",
                               cache / f"{release}_1.0-1")
    assert list(cache.iterdir()) == []


def test_debian_kernels_become_their_folders_once_per_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each debian: value is fetched once (from the image of the first node on it) and
    every node on it then names the folder; image and path kernels are left as they are."""
    fetched: list[tuple[str, str]] = []

    def fake_fetch(text: str, image: object, progress: object) -> Path:
        fetched.append((text, str(image)))
        return tmp_path / text.replace(":", "-")

    monkeypatch.setattr(debian_kernels, "build_image",
                        lambda recipe, mirror, progress: f"image {recipe.name}")
    monkeypatch.setattr(debian_kernels, "fetch", fake_fetch)
    lab = with_kernel(load_lab(REPO / "topologies" / "two-node.yaml"), "debian:6.12",
                      Path.cwd())
    made = with_debian_kernels(lab, None, lambda _m: None)
    assert fetched == [("debian:6.12", "image trixie")]
    assert {n.kernel for n in made.nodes} == {str(tmp_path / "debian-6.12")}
    plain = load_lab(REPO / "topologies" / "two-node.yaml")
    assert with_debian_kernels(plain, None, lambda _m: None) is plain
