"""One live two-node rxe lab shared by every integration test of the session.

The lab comes from a session fixture that calls the lifecycle service (labctl/lab/
lifecycle.py) and tears the lab down at the end of the session, checking that nothing of
it is left (processes, netns, ssh masters, lab directory) and that a second teardown has
nothing to do. In CI (the CI variable set, as root) a skipped integration test fails: the
suite must not pass by not running.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from labctl.lab import lifecycle
from labctl.lab.handle import LabHandle
from labctl.lab.labdir import LabDir
from tests.integration.leftovers import lab_leftovers

REPO = Path(__file__).resolve().parents[2]
# Not the file's own name, so a developer's two-node lab is left alone.
LAB_NAME = os.environ.get("LABCTL_TEST_LAB", "itest")


def labctl(
    *args: str, timeout: float = 900, check: bool = False
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "labctl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"labctl {' '.join(args)} exited {result.returncode}\n"
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
    return result


def in_ci() -> bool:
    return bool(os.environ.get("CI")) and os.geteuid() == 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="integration tests boot VMs and need root")
        for item in items:
            if "integration" in item.keywords:
                item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and in_ci() and "integration" in item.keywords:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"integration test skipped in CI (as root), which is a failure: {reason}"


def _progress(message: str) -> None:
    print(f"up {LAB_NAME}: {message}", file=sys.stderr, flush=True)


def make_topology(directory: Path, source: str, name: str) -> Path:
    data = yaml.safe_load((REPO / "topologies" / source).read_text())
    data["name"] = name
    path = directory / source
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def live_lab(topology: Path, name: str, **options: object) -> Iterator[lifecycle.UpResult]:
    """Up (after removing what an interrupted earlier run left), yield, then destroy and
    check that nothing of the lab is left and that a second destroy has nothing to do."""
    lifecycle.destroy(name)
    result = lifecycle.up(topology, lifecycle.UpOptions(**options), _progress)  # type: ignore[arg-type]
    try:
        yield result
    finally:
        removed = lifecycle.destroy(name)
        assert removed, f"destroy of {name} found nothing to remove"
        assert lab_leftovers(name) == {"netns": [], "qemu": [], "ssh": [], "labdir": []}
        assert lifecycle.destroy(name) == []


@pytest.fixture(scope="session")
def lab_topology(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_topology(tmp_path_factory.mktemp("topology"), "two-node.yaml", LAB_NAME)


@pytest.fixture(scope="session")
def lab_up(lab_topology: Path) -> Iterator[lifecycle.UpResult]:
    yield from live_lab(lab_topology, LAB_NAME)


@pytest.fixture(scope="session")
def lab_handle(lab_up: lifecycle.UpResult) -> LabHandle:
    return LabHandle(LabDir(LAB_NAME))


# The example programs by process name (pgrep -x: the whole name; kernel threads are named
# kworker/..., so they never match).
EXAMPLE_PROGRAMS = ("ibv_.*|ib_.*|rping|mckey|rdma_.*|udaddy|ucmatose|cmtime|rstream|riostream"
                    "|rcopy")


@pytest.fixture(autouse=True)
def no_programs_left_in_the_shared_lab(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test on the shared lab leaves no example program running in a node. One that did
    (a server that outlived its run, busy-polling the node's only vCPU and holding its port)
    made the next tests fail in a full run only; this names the test that leaves one."""
    yield
    if "lab_handle" not in request.fixturenames:
        return
    handle: LabHandle = request.getfixturevalue("lab_handle")
    left = {}
    for node in handle.lab.nodes:
        found = handle.run(node.name, ["pgrep", "-a", "-x", EXAMPLE_PROGRAMS], timeout=60)
        if found.returncode == 0 and found.stdout.strip():
            left[node.name] = found.stdout.strip()
            handle.run(node.name, ["pkill", "-KILL", "-x", EXAMPLE_PROGRAMS], timeout=60)
    assert not left, f"example programs left running in the shared lab's nodes: {left}"
