"""One live two-node rxe lab shared by every integration test of the session."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from labctl.lab.handle import LabHandle
from labctl.lab.labdir import LabDir

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="integration tests boot VMs and need root")
        for item in items:
            if "integration" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def lab_topology(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = yaml.safe_load((REPO / "topologies/two-node.yaml").read_text())
    data["name"] = LAB_NAME
    path = tmp_path_factory.mktemp("topology") / "two-node.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def lab_up(lab_topology: Path) -> Iterator[subprocess.CompletedProcess[str]]:
    labctl("down", "--lab", LAB_NAME)  # a lab left by an interrupted earlier run
    result = labctl("up", str(lab_topology), check=True)
    yield result
    labctl("down", "--lab", LAB_NAME)


@pytest.fixture(scope="session")
def lab_handle(lab_up: subprocess.CompletedProcess[str]) -> LabHandle:
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
