"""scripts/test.sh (the README's test command, what CI runs): its stages, in a copy of the
script beside fake tools that log what they were asked (setup, ruff, mypy, pytest, labctl)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tree(tmp_path: Path, failing_image: str = "") -> tuple[Path, Path]:
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "test.sh"
    script.write_text((ROOT / "scripts" / "test.sh").read_text())
    log = tmp_path / "calls"
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    fakes = {
        tmp_path / "scripts" / "setup.sh": "setup",
        bin_dir / "ruff": "ruff",
        bin_dir / "mypy": "mypy",
        # pytest writes no junit file: the script's summary reads none
        bin_dir / "python": "python",
        bin_dir / "labctl": "labctl",
    }
    for path, name in fakes.items():
        fail = (f'case "$*" in *"build {failing_image}"*) '
                f'echo "error: {failing_image} failed" >&2; exit 1;; esac\n'
                if name == "labctl" and failing_image else "")
        path.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\n{fail}exit 0\n')
        path.chmod(0o755)
    return script, log


def _run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "TEST_WORKERS": "2"})


@pytest.mark.skipif(os.geteuid() != 0, reason="the images stage runs as root only")
def test_the_images_are_built_beside_the_unit_and_integration_tests(tmp_path: Path) -> None:
    """The integration stage does not wait for the images: a lab's `up` waits on the build
    lock of an image still being built (labctl.images.builder), so only their order is the
    script's (the modules' first boots) and the images line comes after the integration's."""
    script, log = _tree(tmp_path)
    result = _run(script)
    assert result.returncode == 0, result.stdout + result.stderr
    calls = log.read_text().splitlines()
    setup = calls.index("setup ")
    built = [c for c in calls if c.startswith("labctl ")]
    assert built == [f"labctl image build {n}" for n in
                     ("trixie", "docker-host", "trixie-dev", "trixie-workloads")] + \
        [f"labctl image box {n}" for n in ("trixie", "trixie-dev")]
    assert all(setup < calls.index(c) for c in built)
    timings = result.stdout.split("stage timings (seconds):")[1].split("\ntests: ")[0]
    stages = [line for line in timings.strip().splitlines() if not line.startswith("    ")]
    assert [line.split()[0] for line in stages] == [
        "setup", "lint", "typecheck", "unit", "integration", "images", "total"]
    assert "built beside the other stages; waited" in timings.split("  images ")[1].splitlines()[0]
    # each image's seconds, under the images stage's line in the summary at the end
    each = [line.strip() for line in timings.splitlines() if line.startswith("    ")]
    assert each == [f"image {n}: 0 s" for n in
                    ("trixie", "docker-host", "trixie-dev", "trixie-workloads")] + \
        [f"box {n}: 0 s" for n in ("trixie", "trixie-dev")]


def test_unit_paths_alone_build_no_image(tmp_path: Path) -> None:
    script, log = _tree(tmp_path)
    result = _run(script, "tests/unit")
    assert result.returncode == 0, result.stdout + result.stderr
    assert not any(c.startswith("labctl ") for c in log.read_text().splitlines())
    assert "  images " not in result.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="the images stage runs as root only")
def test_a_failed_image_build_fails_the_run_and_says_which_stage(tmp_path: Path) -> None:
    script, log = _tree(tmp_path, failing_image="trixie-workloads")
    result = _run(script)
    assert result.returncode == 1
    assert "  images " in result.stdout and "(failed)" in result.stdout.split("  images ")[1]
    calls = log.read_text().splitlines()
    assert "labctl image box trixie" not in calls  # stopped at the first failure
    assert any("tests/integration" in c for c in calls)  # the tests still ran
    # the images built before the failure keep their lines; the log's end is shown
    assert "    image trixie-dev: 0 s" in result.stdout
    assert "the images stage failed; the end of its log:" in result.stderr
    assert "error: trixie-workloads failed" in result.stderr.split("end of its log:")[1]


@pytest.mark.skipif(os.geteuid() != 0, reason="the images stage runs as root only")
def test_a_run_that_stops_early_stops_the_image_builds_too(tmp_path: Path) -> None:
    """Lint fails while the first image is still building: the script exits at once, and
    the build (a process group of its own) gets its Ctrl-C, not left running."""
    script, log = _tree(tmp_path)
    pid_file = tmp_path / "build.pid"
    (tmp_path / ".venv" / "bin" / "labctl").write_text(
        f'#!/bin/sh\necho "labctl $*" >> {log}\necho $$ > {pid_file}\nexec sleep 60\n')
    (tmp_path / ".venv" / "bin" / "ruff").write_text(
        f"#!/bin/sh\nwhile [ ! -s {pid_file} ]; do sleep 0.1; done\nexit 1\n")
    started = time.monotonic()
    result = _run(script)
    assert result.returncode == 1, result.stdout + result.stderr
    assert time.monotonic() - started < 30  # not the build's 60 s
    build = int(pid_file.read_text())
    for _ in range(50):  # the interrupted build ends
        if not Path(f"/proc/{build}").exists():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{build}").exists(), "the image build outlived the script"
    assert "lint" in result.stdout.split("stage timings (seconds):")[1]


def test_the_integration_modules_run_in_two_workers_unless_told_one(tmp_path: Path) -> None:
    """Two pytest-xdist workers, a module (or a group that shares a lab or the Docker host)
    at a time each, in the order the conftest gives (longest first); INTEGRATION_WORKERS=1
    runs one module at a time in pytest's own process."""
    script, log = _tree(tmp_path)
    assert _run(script, "tests/integration").returncode == 0
    runs = [c for c in log.read_text().splitlines() if c.startswith("python -m pytest")]
    assert len(runs) == 1 and "-n 2 --dist loadscope " in runs[0]
    log.unlink()
    one = subprocess.run(["bash", str(script), "tests/integration"], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "INTEGRATION_WORKERS": "1"})
    assert one.returncode == 0, one.stdout + one.stderr
    runs = [c for c in log.read_text().splitlines() if c.startswith("python -m pytest")]
    assert len(runs) == 1 and " -n " not in runs[0] and "--dist" not in runs[0]


def test_integration_groups_keep_shared_labs_in_one_worker_and_know_every_module() -> None:
    """The Docker host VM's modules share a worker, the workloads package's modules too
    (their lab is the package's); every other module is a group of its own, and the table
    of group seconds that orders them names only groups that exist."""
    from tests.integration.conftest import GROUP_SECONDS, worker_group

    assert worker_group("tests/integration/test_docker_provider.py") == \
        worker_group("tests/integration/test_multihost.py") == "docker-host"
    assert worker_group("tests/integration/workloads/test_storage.py") == \
        worker_group("tests/integration/workloads/test_ucx_mpi.py") == "workloads"
    assert worker_group("tests/integration/test_lessons.py") == "test_lessons"
    modules = [p.relative_to(ROOT).as_posix()
               for p in (ROOT / "tests" / "integration").rglob("test_*.py")]
    assert set(GROUP_SECONDS) <= {worker_group(m) for m in modules}
