"""scripts/setup.sh installs per purpose: `--minimal` (what ./scripts/demo.sh runs) what a
qemu lab needs and labctl alone; no argument (what ./scripts/test.sh runs) everything the
tests need too and labctl[dev]. A package named per release (libpcap, the docker CLI) is
installed under the name the release's index has; nothing reaches the network when all is
installed. Run here on a copy of the script with apt, dpkg and Python replaced by stubs
that record what they were asked (nothing is installed).

scripts/demo.sh removes only the lab it made: one already there is refused, untouched."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from labctl.paths import DEFAULT_STATE_ROOT
from tests.unit.test_doctor import DOCKER_CLI, setup_lists

ROOT = Path(__file__).resolve().parents[2]
BASH = shutil.which("bash") or "/bin/bash"
# The two releases' indexes as `apt-cache policy` showed them (2026-11-29): bookworm has
# neither libpcap0.8t64 nor docker-cli (its docker.io holds the client), trixie has no
# libpcap0.8 candidate (libpcap0.8t64 provides it).
BOOKWORM_LACKS = ("libpcap0.8t64", "docker-cli")
TRIXIE_LACKS = ("libpcap0.8",)


def _stub(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def _checkout(tmp_path: Path) -> Path:
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", checkout / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", checkout / "pyproject.toml")
    return checkout


def run_setup(tmp_path: Path, *args: str, unavailable: tuple[str, ...] = (),
              installed: tuple[str, ...] = (), docker: bool = False) -> tuple[int, str, str]:
    """setup.sh ARGS on a host where only `installed` packages are installed and every
    package but the `unavailable` ones has an install candidate (`docker`: a docker command
    on PATH); the apt-get and Python calls land in tmp_path/log."""
    checkout = _checkout(tmp_path)
    stubs = tmp_path / "stubs"
    shutil.rmtree(stubs, ignore_errors=True)
    stubs.mkdir()
    log = tmp_path / "log"
    _stub(stubs, "id", "echo 0")
    _stub(stubs, "dpkg-query", f'case " {" ".join(installed)} " in *" $4 "*) '
          "echo 'install ok installed';; *) exit 1;; esac")
    _stub(stubs, "apt-cache", f'echo "$2:"; case " {" ".join(unavailable)} " in *" $2 "*) '
          "echo '  Candidate: (none)';; *) echo '  Candidate: 1.0-1';; esac")
    sysroot = tmp_path / "sysroot"
    (sysroot / "usr" / "sbin").mkdir(parents=True, exist_ok=True)
    policy_rc = sysroot / "usr" / "sbin" / "policy-rc.d"
    # the install notes whether services were held back (policy-rc.d in place) as it ran
    _stub(stubs, "apt-get", f'echo "apt-get $*" >> {log}; case "$1" in install) '
          f'[ -x {policy_rc} ] && "{policy_rc}"; echo "policy-rc.d: $?" >> {log};; esac')
    _stub(stubs, "systemctl", f'echo "systemctl $*" >> {log}')
    if docker:
        _stub(stubs, "docker", "exit 0")
    venv = (f'mkdir -p .venv/bin; printf \'#!/bin/sh\\necho "python $*" >> {log}\\n\' '
            "> .venv/bin/python; chmod +x .venv/bin/python; cp .venv/bin/python .venv/bin/labctl")
    _stub(stubs, "python3", venv)
    result = subprocess.run([BASH, str(checkout / "scripts" / "setup.sh"), *args],
                            capture_output=True, text=True, timeout=60, check=False,
                            env={"PATH": f"{stubs}:/usr/bin:/bin", "SETUP_SYSROOT": str(sysroot)})
    return result.returncode, result.stdout + result.stderr, log.read_text() if log.exists() else ""


def _installed(log: str) -> list[str]:
    (install,) = [line for line in log.splitlines() if line.startswith("apt-get install")]
    return [word for word in install.split()[2:] if not word.startswith("-")]


def _as_on(release_lacks: tuple[str, ...], words: list[str]) -> list[str]:
    """The list's words as that release names them: the first name it has."""
    return [next(n for n in w.split("|") if n not in release_lacks) for w in words]


@pytest.mark.parametrize("lacks", [BOOKWORM_LACKS, TRIXIE_LACKS], ids=["bookworm", "trixie"])
def test_minimal_installs_what_a_qemu_lab_needs_and_labctl_alone(tmp_path: Path,
                                                                 lacks: tuple[str, ...]) -> None:
    code, out, log = run_setup(tmp_path, "--minimal", unavailable=lacks)
    assert code == 0, out
    installed = _installed(log)
    assert installed == _as_on(lacks, setup_lists()["lab"])
    assert ("libpcap0.8" in installed) is (lacks == BOOKWORM_LACKS)
    assert ("libpcap0.8t64" in installed) is (lacks == TRIXIE_LACKS)
    assert "python -m pip install -q -e ." in log.splitlines()
    assert "[dev]" not in log and "docker" not in log


@pytest.mark.parametrize(("lacks", "docker_package"), [(BOOKWORM_LACKS, "docker.io"),
                                                       (TRIXIE_LACKS, "docker-cli")],
                         ids=["bookworm", "trixie"])
def test_without_arguments_it_installs_what_the_tests_need(tmp_path: Path,
                                                           lacks: tuple[str, ...],
                                                           docker_package: str) -> None:
    code, out, log = run_setup(tmp_path, unavailable=lacks)
    assert code == 0, out
    lists = setup_lists()
    installed = _installed(log)
    assert installed == _as_on(lacks, lists["lab"] + lists["tests"]) + lists["optional"]
    assert docker_package in installed and DOCKER_CLI in lists["tests"]
    said = out.splitlines()
    assert said[0].startswith("setup.sh: missing qemu-system-x86 ")  # why apt-get update runs
    assert "libpcap0.8t64 or libpcap0.8" in said[0] and "docker-cli or docker.io" in said[0]
    assert "?" not in said[0] and "vagrant" not in said[0]  # optional ones: not "missing"
    assert f"setup.sh: installing {' '.join(installed)}" in said
    assert "python -m pip install -q -e .[dev]" in log.splitlines()
    # bookworm's docker.io brings the engine: kept from starting during the install (the
    # policy says 101, "not allowed") and left disabled; trixie's docker-cli has none
    held = docker_package == "docker.io"
    assert ("policy-rc.d: 101" in log.splitlines()) is held
    assert ("systemctl disable docker.service docker.socket" in log.splitlines()) is held
    assert not (tmp_path / "sysroot" / "usr" / "sbin" / "policy-rc.d").exists()


def test_a_missing_optional_package_says_what_is_lost(tmp_path: Path) -> None:
    """setup.sh said "its tests will be skipped", yet in CI (as root) a skipped integration
    test fails: each message says what the machine loses, the vagrant one that CI fails."""
    code, out, log = run_setup(tmp_path, unavailable=("tshark", "vagrant-libvirt"))
    assert code == 0, out
    assert "tshark" not in _installed(log) and "vagrant-libvirt" not in _installed(log)
    assert "will be skipped" not in out
    assert ("setup.sh: tshark is not in this release's packages: the unit test that checks "
            "labctl's decoder against Wireshark is skipped") in out
    vagrant = next(line for line in out.splitlines() if "vagrant-libvirt is not" in line)
    assert "no vagrant labs here" in vagrant and "a failure under CI=true" in vagrant
    assert "LABCTL_TEST_VAGRANT=0" in vagrant
    conftest = (ROOT / "tests" / "integration" / "conftest.py").read_text()
    assert "skipped in CI (as root), which is a failure" in conftest  # the policy it names
    assert 'os.environ.get("LABCTL_TEST_VAGRANT") == "0"' in (
        ROOT / "tests" / "integration" / "test_vagrant_live.py").read_text()


def _everything(*besides: str) -> tuple[str, ...]:
    """Every package setup.sh asks for, as installed on trixie (plus `besides`)."""
    words = [w for words in setup_lists().values() for w in words]
    return (*_as_on(TRIXIE_LACKS, words), *besides)


def test_nothing_reaches_the_network_when_everything_is_installed(tmp_path: Path) -> None:
    """The first run fills .venv; the next ones (the demo's every run) call neither apt-get
    nor pip: trixie's libpcap0.8t64 counts as libpcap, a docker command as the docker CLI."""
    installed = tuple(p for p in _everything() if not p.startswith("docker"))
    code, out, log = run_setup(tmp_path, installed=installed, docker=True)
    assert code == 0, out
    assert "apt-get" not in log  # no update either
    assert "python -m pip install -q -e .[dev]" in log.splitlines()
    for args in ((), ("--minimal",)):  # labctl[dev] holds what --minimal asks for
        (tmp_path / "log").unlink()
        code, out, _ = run_setup(tmp_path, *args, installed=installed, docker=True)
        assert code == 0, out
        assert (tmp_path / "log").read_text().splitlines() == ["python -c import labctl"]
        assert "nothing to install" in out


def test_a_fuller_install_or_a_changed_pyproject_runs_pip_again(tmp_path: Path) -> None:
    installed = _everything("docker-cli")
    code, out, log = run_setup(tmp_path, "--minimal", installed=installed)
    assert code == 0 and "python -m pip install -q -e ." in log.splitlines(), out
    (tmp_path / "log").unlink()
    code, out, log = run_setup(tmp_path, installed=installed)  # labctl alone is not [dev]
    assert code == 0 and "python -m pip install -q -e .[dev]" in log.splitlines(), out
    stamp = tmp_path / "checkout" / ".venv" / ".setup-stamp"
    assert stamp.read_text().startswith("dev ")
    stamp.write_text("dev 0000\n")  # as written against another pyproject.toml
    (tmp_path / "log").unlink()
    code, out, log = run_setup(tmp_path, installed=installed)
    assert code == 0 and "python -m pip install -q -e .[dev]" in log.splitlines(), out


def test_no_install_when_the_docker_command_is_there_already(tmp_path: Path) -> None:
    """Docker's own docker-ce-cli (not Debian's) is enough: Debian's would conflict."""
    installed = tuple(p for p in _everything() if not p.startswith("docker"))
    code, out, log = run_setup(tmp_path, installed=installed, docker=False)
    assert code == 0, out
    assert _installed(log) == ["docker-cli"]
    (tmp_path / "log").unlink()
    code, out, log = run_setup(tmp_path, installed=installed, docker=True)
    assert code == 0, out
    assert "apt-get" not in log


@pytest.mark.parametrize("argument", ["--minimum", "minimal", "--full"])
def test_an_unknown_argument_is_refused_before_anything_is_done(tmp_path: Path,
                                                                argument: str) -> None:
    code, out, log = run_setup(tmp_path, argument)
    assert code == 2
    assert f"unknown argument '{argument}'" in out and "usage: scripts/setup.sh [--minimal]" in out
    assert log == ""


def test_demo_and_test_scripts_ask_for_their_own_lists() -> None:
    """README's first command is the demo (a qemu lab only), its second the tests; CI runs
    the second."""
    demo = (ROOT / "scripts" / "demo.sh").read_text()
    tests = (ROOT / "scripts" / "test.sh").read_text()
    assert "./scripts/setup.sh --minimal" in demo
    assert re.search(r"^stage setup \./scripts/setup\.sh *(#.*)?$", tests, re.M), tests
    assert "exec ./scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def run_demo(tmp_path: Path, *, existing: bool) -> tuple[int, str, list[str]]:
    """demo.sh in a copy of the checkout whose setup.sh and labctl are stubs (labctl records
    its arguments), against a state dir that holds a two-node lab or not."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    (checkout / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "demo.sh", checkout / "scripts" / "demo.sh")
    log = tmp_path / "labctl.log"
    _stub(checkout / "scripts", "setup.sh", "exit 0")
    _stub(checkout / ".venv" / "bin", "labctl", f'echo "$*" >> {log}')
    state = tmp_path / "state"
    if existing:
        (state / "two-node").mkdir(parents=True)
    result = subprocess.run([BASH, str(checkout / "scripts" / "demo.sh")], capture_output=True,
                            text=True, timeout=60, check=False,
                            env={"PATH": "/usr/bin:/bin", "LABCTL_STATE_DIR": str(state)})
    calls = log.read_text().splitlines() if log.exists() else []
    return result.returncode, result.stdout + result.stderr, calls


def test_the_demo_refuses_a_lab_of_its_name_and_leaves_it_alone(tmp_path: Path) -> None:
    code, out, calls = run_demo(tmp_path, existing=True)
    assert code == 2
    assert calls == []  # no up, no run, above all no down
    assert "error: a lab named two-node is already there" in out
    assert "hint: use it ('.venv/bin/labctl run pingpong --lab two-node'), or remove it " \
           "('.venv/bin/labctl down --lab two-node')" in out
    assert (tmp_path / "state" / "two-node").is_dir()


def test_the_demo_makes_runs_and_removes_its_own_lab(tmp_path: Path) -> None:
    code, out, calls = run_demo(tmp_path, existing=False)
    assert code == 0, out
    assert calls == ["up topologies/two-node.yaml",
                     "run pingpong --lab two-node --transport rc --size 4096 --iters 1000",
                     "down --lab two-node"]


def test_the_demo_looks_where_labctl_keeps_labs() -> None:
    demo = (ROOT / "scripts" / "demo.sh").read_text()
    assert f"${{LABCTL_STATE_DIR:-{DEFAULT_STATE_ROOT}}}" in demo
    assert re.search(r"^name: two-node$", (ROOT / "topologies" / "two-node.yaml").read_text(),
                     re.M)


def test_the_readme_session_refuses_a_lab_of_its_name(tmp_path: Path) -> None:
    """scripts/readme-session.sh takes its lab down at the end: like the demo, it refuses
    to start over a lab it did not make, and leaves that lab alone."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    (checkout / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "readme-session.sh", checkout / "scripts")
    log = tmp_path / "labctl.log"
    _stub(checkout / ".venv" / "bin", "labctl", f'echo "$*" >> {log}')
    state = tmp_path / "state"
    (state / "other").mkdir(parents=True)
    result = subprocess.run([BASH, str(checkout / "scripts" / "readme-session.sh"), "other"],
                            capture_output=True, text=True, timeout=60, check=False,
                            env={"PATH": "/usr/bin:/bin", "LABCTL_STATE_DIR": str(state),
                                 "TMPDIR": str(tmp_path)})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "error: a lab named other is already there" in result.stderr
    assert "hint: run it with another name" in result.stderr
    assert not log.exists() and (state / "other").is_dir()
