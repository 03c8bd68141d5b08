"""scripts/setup.sh installs per purpose: `--minimal` (what ./scripts/demo.sh runs) what a
qemu lab needs and labctl alone; no argument (what ./scripts/test.sh runs) everything the
tests need too and labctl[dev]. Run here on a copy of the script with apt, dpkg and Python
replaced by stubs that record what they were asked (nothing is installed)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.test_doctor import setup_lists

ROOT = Path(__file__).resolve().parents[2]
BASH = shutil.which("bash") or "/bin/bash"


def _stub(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def run_setup(tmp_path: Path, *args: str, unavailable: str = "") -> tuple[int, str, str]:
    """setup.sh ARGS on a host where no package is installed and every one but
    `unavailable` has an install candidate; the apt-get and pip calls land in tmp_path/log."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", checkout / "scripts" / "setup.sh")
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    log = tmp_path / "log"
    _stub(stubs, "id", "echo 0")
    _stub(stubs, "dpkg-query", "exit 1")  # not installed
    _stub(stubs, "apt-cache", f'echo "$2:"; [ "$2" = "{unavailable}" ] && '
          "echo '  Candidate: (none)' || echo '  Candidate: 1.0-1'")
    _stub(stubs, "apt-get", f'echo "apt-get $*" >> {log}')
    venv_python = (f'mkdir -p .venv/bin; printf \'#!/bin/sh\\necho "pip $*" >> {log}\\n\' '
                   "> .venv/bin/python; chmod +x .venv/bin/python")
    _stub(stubs, "python3", venv_python)
    result = subprocess.run([BASH, str(checkout / "scripts" / "setup.sh"), *args],
                            capture_output=True, text=True, timeout=60, check=False,
                            env={"PATH": f"{stubs}:/usr/bin:/bin"})
    return result.returncode, result.stdout + result.stderr, log.read_text() if log.exists() else ""


def _installed(log: str) -> list[str]:
    (install,) = [line for line in log.splitlines() if line.startswith("apt-get install")]
    return [word for word in install.split()[2:] if not word.startswith("-")]


def test_minimal_installs_what_a_qemu_lab_needs_and_labctl_alone(tmp_path: Path) -> None:
    code, out, log = run_setup(tmp_path, "--minimal")
    assert code == 0, out
    assert _installed(log) == setup_lists()["lab"]
    assert "pip -m pip install -q -e ." in log.splitlines()
    assert "[dev]" not in log


def test_without_arguments_it_installs_what_the_tests_need(tmp_path: Path) -> None:
    code, out, log = run_setup(tmp_path, unavailable="tshark")
    assert code == 0, out
    lists = setup_lists()
    optional = [p for p in lists["optional"] if p != "tshark"]
    assert _installed(log) == lists["lab"] + lists["tests"] + optional
    assert "tshark is not available here; its tests will be skipped" in out
    assert "pip -m pip install -q -e .[dev]" in log.splitlines()


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
