"""`labctl doctor`'s host package lines: each Debian package scripts/setup.sh installs is
found by what uses it, and a missing one gets its own line naming the provider, feature or
tests that need it, with the apt-get hint. Only the qemu provider's own tools (and, without
a cached node image, the image build's) can turn its verdict to `no`.

The host is faked: PATH is a directory of stub executables, the files doctor looks for are
made under tmp_path, and find_library (how scapy finds libpcap) is replaced."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from labctl.cli import doctor
from labctl.cli.doctor import HOST_PACKAGES, NO, OK, SKIP, WARN, Check
from tests.unit.clirun import run_main
from tests.unit.jsonshape import parsed

ROOT = Path(__file__).resolve().parents[2]
# What Debian's vagrant 2.3 prints with Debian's vagrant-libvirt installed (seen on the
# project's host), and with no plugin at all.
PLUGIN_LINE = "vagrant-libvirt (0.11.2, system)"
NO_PLUGINS = "No plugins installed."
SLEEP = shutil.which("sleep")  # found before the fake PATH replaces the real one
BINARIES = ("qemu-system-x86_64", "qemu-img", "ssh", "mmdebstrap", "mkfs.ext4", "zstd", "depmod",
            "ip", "vagrant", "libvirtd", "virsh", "dnsmasq", "iptables", "tshark", "gcc", "cpio")


class FakeHost:
    """Every host package present; remove() takes one away the way a host lacks it."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bin = root / "bin"
        self.bin.mkdir()
        for name in BINARIES:
            self.stub(name, "exit 0")
        self.stub("vagrant", f'[ "$1 $2" = "plugin list" ] && echo "{PLUGIN_LINE}"')
        self.libpcap: str | None = "libpcap.so.0.8"
        files = {"KEYRING": root / "keyrings/debian-archive-keyring.gpg",
                 "CA_BUNDLE": root / "certs/ca-certificates.crt",
                 "LIBC_HEADER": root / "include/stdio.h"}
        driver = root / "lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so"
        self.files = {**files, "driver": driver}
        for path in self.files.values():
            path.parent.mkdir(parents=True)
            path.write_bytes(b"")
        for name, path in files.items():
            monkeypatch.setattr(doctor, name, path)
        monkeypatch.setattr(doctor, "LIBVIRT_QEMU_DRIVER",
                            (str(root / "lib/*/libvirt/connection-driver/"
                                 "libvirt_driver_qemu.so"),))
        monkeypatch.setattr(doctor, "SBIN_DIRS", ())  # this host's /usr/sbin has them all
        monkeypatch.setattr(doctor, "find_library",
                            lambda name: self.libpcap if name == "pcap" else None)
        monkeypatch.setenv("PATH", str(self.bin))

    def stub(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)

    def remove(self, package: str) -> None:
        REMOVALS[package](self)


def _binary(name: str) -> Callable[[FakeHost], None]:
    return lambda host: (host.bin / name).unlink()


def _file(key: str) -> Callable[[FakeHost], None]:
    return lambda host: host.files[key].unlink()


def _no_libpcap(host: FakeHost) -> None:
    host.libpcap = None


def _no_plugin(host: FakeHost) -> None:
    host.stub("vagrant", f'[ "$1 $2" = "plugin list" ] && echo "{NO_PLUGINS}"')


# How a host lacks each package: doctor must name it, so every package has one.
REMOVALS: dict[str, Callable[[FakeHost], None]] = {
    "qemu-system-x86": _binary("qemu-system-x86_64"), "qemu-utils": _binary("qemu-img"),
    "openssh-client": _binary("ssh"), "mmdebstrap": _binary("mmdebstrap"),
    "e2fsprogs": _binary("mkfs.ext4"), "debian-archive-keyring": _file("KEYRING"),
    "zstd": _binary("zstd"), "kmod": _binary("depmod"), "ca-certificates": _file("CA_BUNDLE"),
    "libpcap0.8": _no_libpcap, "iproute2": _binary("ip"), "vagrant": _binary("vagrant"),
    "vagrant-libvirt": _no_plugin, "libvirt-daemon": _binary("libvirtd"),
    "libvirt-daemon-driver-qemu": _file("driver"), "libvirt-clients": _binary("virsh"),
    "dnsmasq-base": _binary("dnsmasq"), "iptables": _binary("iptables"),
    "tshark": _binary("tshark"), "gcc": _binary("gcc"), "libc6-dev": _file("LIBC_HEADER"),
    "cpio": _binary("cpio"),
}
PACKAGES = [p.package for p in HOST_PACKAGES]
QEMU_NEEDS = [p.package for p in HOST_PACKAGES if p.need == doctor.QEMU]
IMAGE_NEEDS = [p.package for p in HOST_PACKAGES if p.need == doctor.IMAGE]
OPTIONAL = [p.package for p in HOST_PACKAGES if p.need == doctor.OPTIONAL]


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHost:
    return FakeHost(tmp_path, monkeypatch)


def _lines(image_cached: bool = False) -> dict[str, Check]:
    return {c.name: c for c in doctor.check_host_packages(image_cached)}


def _qemu_verdict(checks: dict[str, Check], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    others = [Check("Docker engine (local)", NO, ""), Check("per-netns rxe (host)", SKIP, "")]
    (qemu,) = [v for v in doctor.verdicts([*checks.values(), *others])
               if v["provider"] == "qemu"]
    return str(qemu["verdict"])


def test_every_package_has_a_way_to_be_missing() -> None:
    assert sorted(REMOVALS) == sorted(PACKAGES)
    assert QEMU_NEEDS == ["qemu-system-x86", "qemu-utils", "openssh-client"]
    assert IMAGE_NEEDS == ["mmdebstrap", "e2fsprogs", "debian-archive-keyring"]


def test_a_host_with_every_package_has_every_line_ok(host: FakeHost,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _lines()
    assert list(lines) == ["qemu tools", *PACKAGES]
    assert {name: c.result for name, c in lines.items() if c.result != OK} == {}
    assert lines["vagrant-libvirt"].detail.startswith(PLUGIN_LINE)
    assert lines["libpcap0.8"].detail.startswith("libpcap.so.0.8; for `labctl capture --filter`")
    assert lines["zstd"].detail.startswith(f"{host.bin / 'zstd'}; for building node images")
    assert _qemu_verdict(lines, monkeypatch) == "works"


@pytest.mark.parametrize("package", PACKAGES)
def test_a_missing_package_has_its_line_naming_what_needs_it(
        host: FakeHost, package: str, monkeypatch: pytest.MonkeyPatch) -> None:
    host.remove(package)
    lines = _lines(image_cached=False)
    spec = next(p for p in HOST_PACKAGES if p.package == package)
    line = lines[package]
    assert line.detail.startswith(f"missing ({spec.what}): needed for {spec.used_by}"), line
    assert line.todo == f"apt-get install {package}"
    blocks_qemu = package in QEMU_NEEDS or package in IMAGE_NEEDS
    assert line.result == (NO if blocks_qemu else WARN)
    # the others stay ok: one missing package is one line (vagrant's plugins are not asked)
    also = ["vagrant-libvirt"] if package == "vagrant" else []
    assert [n for n, c in lines.items() if c.result != OK and n != "qemu tools"] == [
        package, *also]
    assert lines["qemu tools"].result == (NO if blocks_qemu else OK)
    if blocks_qemu:
        assert lines["qemu tools"].detail == f"missing: {package}"
        assert lines["qemu tools"].todo == f"apt-get install {package}"
    assert _qemu_verdict(lines, monkeypatch) == ("no" if blocks_qemu else "works")


@pytest.mark.parametrize("package", IMAGE_NEEDS)
def test_image_build_tools_do_not_block_qemu_labs_when_an_image_is_cached(
        host: FakeHost, package: str, monkeypatch: pytest.MonkeyPatch) -> None:
    host.remove(package)
    lines = _lines(image_cached=True)
    assert lines[package].result == WARN
    assert lines[package].detail.endswith("a node image is cached, so labs still start")
    assert lines["qemu tools"].result == OK
    assert f"building one needs {package}" in lines["qemu tools"].detail
    assert _qemu_verdict(lines, monkeypatch) == "works"


@pytest.mark.parametrize("package", QEMU_NEEDS)
def test_the_qemu_tools_block_qemu_labs_even_with_a_cached_image(
        host: FakeHost, package: str, monkeypatch: pytest.MonkeyPatch) -> None:
    host.remove(package)
    lines = _lines(image_cached=True)
    assert (lines[package].result, lines["qemu tools"].result) == (NO, NO)
    assert _qemu_verdict(lines, monkeypatch) == "no"


def test_several_missing_are_named_together_in_one_hint(host: FakeHost) -> None:
    for package in ("qemu-utils", "mmdebstrap", "tshark"):
        host.remove(package)
    summary = _lines()["qemu tools"]
    assert (summary.result, summary.detail) == (NO, "missing: qemu-utils, mmdebstrap")
    assert summary.todo == "apt-get install qemu-utils mmdebstrap"


def test_without_vagrant_its_plugins_are_not_asked_for(host: FakeHost) -> None:
    host.remove("vagrant")
    lines = _lines()
    assert lines["vagrant"].result == WARN
    plugin = lines["vagrant-libvirt"]
    assert plugin.result == SKIP
    assert plugin.detail.startswith("vagrant is not installed, so its plugins cannot be listed")
    assert plugin.todo == "apt-get install vagrant vagrant-libvirt"


def test_a_vagrant_that_hangs_is_given_up_on(host: FakeHost,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    host.stub("vagrant", f"exec {SLEEP} 30")
    monkeypatch.setattr(doctor, "VAGRANT_PLUGINS_TIMEOUT", 0.5)
    started = time.monotonic()
    plugin = _lines()["vagrant-libvirt"]
    assert time.monotonic() - started < 10
    assert plugin.result == WARN
    assert plugin.detail.startswith("`vagrant plugin list` did not answer in 0.5 s")
    assert plugin.todo == "run `vagrant plugin list` to see why"


def test_a_vagrant_that_fails_says_how(host: FakeHost) -> None:
    host.stub("vagrant", 'echo "Vagrant failed to initialize: \\033[31m$(printf "%0300d" 0)" >&2'
              "; exit 1")
    plugin = _lines()["vagrant-libvirt"]
    assert plugin.result == WARN
    said = re.match(r"`vagrant plugin list` exited 1: (.*); needed for ", plugin.detail)
    assert said, plugin.detail
    assert "\x1b" not in said.group(1) and len(said.group(1)) < 80  # short_repr'd


def test_vagrant_is_asked_from_the_root_directory(host: FakeHost, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Vagrant reads the Vagrantfile of its working directory (Ruby code): doctor runs it
    from /, wherever doctor itself was started."""
    host.stub("vagrant", f'pwd > {tmp_path / "cwd"}; echo "{PLUGIN_LINE}"')
    monkeypatch.chdir(tmp_path)
    assert _lines()["vagrant-libvirt"].result == OK
    assert (tmp_path / "cwd").read_text().strip() == "/"


def test_sbin_is_searched_for_tools_off_a_users_path(host: FakeHost, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    (host.bin / "iptables").rename(sbin / "iptables")
    monkeypatch.setattr(doctor, "SBIN_DIRS", (sbin,))
    line = _lines()["iptables"]
    assert (line.result, line.detail.split(";")[0]) == (OK, str(sbin / "iptables"))


def test_doctor_json_on_a_host_without_tshark(host: FakeHost, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The whole command: its documented shape, the missing tool's line, and the qemu
    provider still working (root faked; KVM and the image cache left out)."""
    host.remove("tshark")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(doctor, "node_image_cached", lambda: False)
    monkeypatch.setattr(doctor, "check_kvm", lambda: Check("KVM", WARN, "faked"))
    code, out, _ = run_main(monkeypatch, capsys, "doctor", "--json")
    report = parsed("doctor", out)
    assert code == 0 and report.usable
    checks = {c.name: c for c in report.checks}
    assert checks["tshark"].result == "warn"
    assert "the decoder's cross-check against Wireshark" in checks["tshark"].detail
    assert checks["qemu tools"].result == "ok"
    assert report.providers[0] == {
        "provider": "qemu", "engine": None, "verdict": "works",
        "detail": "one qemu VM per node"}
    assert set(json.loads(out)) == {"checks", "providers", "usable"}
    code, text, _ = run_main(monkeypatch, capsys, "doctor")
    assert code == 0
    assert "qemu provider: works" in " ".join(text.split())


SETUP_LISTS = ("lab", "tests", "optional")  # scripts/setup.sh's package arrays


def setup_lists() -> dict[str, list[str]]:
    """scripts/setup.sh's package lists by name (comments and quotes dropped); a word `A|B`
    is one package named per release (trixie's name first)."""
    setup = re.sub(r"#.*", "", (ROOT / "scripts" / "setup.sh").read_text())
    lists = {m.group(1): m.group(2).replace("'", "").split()
             for m in re.finditer(r"^(\w+)=\(([^)]*)\)", setup, re.M)}
    assert set(SETUP_LISTS) <= set(lists), f"scripts/setup.sh lacks one of {SETUP_LISTS}"
    return {name: lists[name] for name in SETUP_LISTS}


DOCKER_CLI = "docker-cli|docker.io"  # trixie's client alone; bookworm's has the engine too


def test_doctor_checks_every_package_setup_installs() -> None:
    """Every system package scripts/setup.sh installs has its doctor line, and doctor checks
    none it does not install; only the Python ones, which make the .venv, are setup's own.
    A package named per release is checked under one of its names (libpcap by bookworm's;
    the hint's apt-get takes it on trixie too, which provides it), the docker CLI by
    doctor's "docker CLI" line, whose hint names both packages."""
    words = {p for packages in setup_lists().values() for p in packages}
    setup_only = {"python3", "python3-venv", "python3-pip"}
    assert setup_only <= words
    assert DOCKER_CLI in words
    assert "apt-get install docker-cli (or docker.io)" in Path(doctor.__file__).read_text()
    checked = set()
    for word in words - setup_only - {DOCKER_CLI}:
        names = [n for n in word.split("|") if n in PACKAGES]
        assert len(names) == 1, (word, names)
        checked.add(names[0])
    assert sorted(checked) == sorted(PACKAGES)


def test_the_demos_packages_are_what_a_qemu_lab_needs() -> None:
    """`setup.sh --minimal` (demo.sh) installs every package the qemu provider or the image
    build needs, and nothing only the tests or the vagrant provider use."""
    lab = set(setup_lists()["lab"])
    assert set(QEMU_NEEDS + IMAGE_NEEDS) <= lab
    tests_only = {p.package for p in HOST_PACKAGES if p.used_by.startswith("the tests only")}
    vagrant = {p.package for p in HOST_PACKAGES if "vagrant provider" in p.used_by
               and p.package != "openssh-client"}
    assert tests_only == {"tshark", "gcc", "libc6-dev", "cpio"}
    assert vagrant == {"vagrant", "vagrant-libvirt", "libvirt-daemon",
                       "libvirt-daemon-driver-qemu", "libvirt-clients", "dnsmasq-base",
                       "iptables"}
    assert lab & (tests_only | vagrant) == set()


def test_the_host_rdma_probes_are_bounded_in_time(host: FakeHost,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel whose config doctor cannot read: `modprobe -n rdma_rxe` decides, and one
    that hangs counts as not loadable instead of hanging doctor."""
    monkeypatch.setattr(doctor, "kernel_config", dict)
    monkeypatch.setattr(doctor, "RXE_MODULE", host.bin / "rdma_rxe")  # not loaded
    host.stub("modprobe", "exit 0")
    host.stub("rdma", 'echo "netns shared copy-on-fork on"')
    checks, usable = doctor.check_host_rdma()
    assert usable and checks[0].detail.endswith("rdma_rxe is loadable")
    assert (checks[1].result, checks[1].detail) == (OK, "netns shared copy-on-fork on")
    host.stub("modprobe", f"exec {SLEEP} 30")
    monkeypatch.setattr(doctor, "QUICK_TIMEOUT", 0.5)
    started = time.monotonic()
    checks, usable = doctor.check_host_rdma()
    assert time.monotonic() - started < 10
    assert not usable and checks[0].result == NO and "rdma_rxe not found" in checks[0].detail


# --- the verdicts come from the provider registry -----------------------------------------
def _checks(**results: str) -> list[Check]:
    names = {"tools": "qemu tools", "local": "Docker engine (local)",
             "host_probe": "per-netns rxe (host)", "vm_probe": "per-netns rxe (VM)"}
    return [Check(names[key], result, "") for key, result in results.items()]


@pytest.mark.parametrize(("root", "checks", "expected"), [
    (True, _checks(tools=OK, local=NO, host_probe=SKIP), [
        ("qemu", None, "works", "one qemu VM per node"),
        ("docker", "vm", "available", "the Docker host VM starts on demand"),
        ("docker", "local", "no", "needs a local Docker engine and a host kernel that passes "
                                  "the per-netns probe")]),
    (False, _checks(tools=NO, local=OK, host_probe=OK), [
        ("qemu", None, "no", "needs root and the qemu tools"),
        ("docker", "vm", "no", "the Docker host VM needs root and the qemu tools"),
        ("docker", "local", "works", "containers on this host's engine and kernel")]),
    (True, _checks(tools=OK, local=NO, host_probe=NO, vm_probe=NO), [
        ("qemu", None, "works", "one qemu VM per node"),
        ("docker", "vm", "no", "the Docker host VM runs but its rxe probe failed"),
        ("docker", "local", "no", "needs a local Docker engine and a host kernel that passes "
                                  "the per-netns probe")]),
    (False, _checks(tools=OK, local=NO, host_probe=NO, vm_probe=OK), [
        ("qemu", None, "no", "needs root"),
        ("docker", "vm", "works", "rxe works in the running Docker host VM"),
        ("docker", "local", "no", "needs a local Docker engine and a host kernel that passes "
                                  "the per-netns probe")]),
])
def test_each_registered_provider_gets_its_verdict(
        monkeypatch: pytest.MonkeyPatch, root: bool, checks: list[Check],
        expected: list[tuple[str, str | None, str, str]]) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0 if root else 1000)
    assert [(v["provider"], v["engine"], v["verdict"], v["detail"])
            for v in doctor.verdicts(checks)] == expected


def test_a_provider_registered_elsewhere_is_judged_without_a_change_to_doctor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry line is all a new provider needs for doctor's verdicts (and its JSON)."""
    from labctl import capabilities

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    capabilities.register("ut-doctor", capabilities.QEMU, "tests.unit:nothing", "test nodes",
                          host=(capabilities.HostVerdict(None, {"qemu tools": "the tools"},
                                                         "a test node per node"),))
    try:
        found = doctor.verdicts(_checks(tools=NO, local=NO, host_probe=NO))
    finally:
        capabilities.unregister("ut-doctor")
    assert found[-1] == {"provider": "ut-doctor", "engine": None, "verdict": "no",
                         "detail": "needs the tools"}
    assert [v["provider"] for v in found[:-1]] == ["qemu", "docker", "docker"]


def test_the_checks_the_registry_names_are_doctors() -> None:
    """A verdict resting on a check doctor does not make would always say no."""
    from labctl import capabilities

    source = Path(doctor.__file__).read_text()
    named = {check for _, host in capabilities.host_verdicts()
             for check in [*host.needs, *([host.probe] if host.probe else [])]}
    assert named and {n for n in named if f'Check("{n}"' not in source} == set()
