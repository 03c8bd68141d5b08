"""One live two-node rxe lab shared by every integration test of the session.

The lab is labctl's pytest plugin's session lab (labctl/pytest_plugin: the `rdma_lab`
fixture, brought up and torn down through the lifecycle service), chosen here by
overriding the plugin's `rdma_lab_spec`: the two-node topology under LABCTL_TEST_LAB's
name, made afresh, and after the teardown checked that nothing of it is left (processes,
netns, ssh masters, lab directory) and that a second teardown has nothing to do. The
fixtures the tests use (`lab_up`, `lab_handle`, `lab_topology`) are views of it. A test
module that needs a lab of its own makes it with modulelab.module_lab. In CI
(the CI variable set, as root) a skipped integration test fails: the suite must not pass
by not running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from labctl.lab import lifecycle
from labctl.lab.handle import LabHandle
from labctl.pytest_plugin import LabSpec, RdmaLab
from tests.integration.leftovers import lab_leftovers

REPO = Path(__file__).resolve().parents[2]
# scripts/test.sh runs the integration modules in two pytest-xdist workers at once (a lab
# spends much of its time waiting for its guests: one run alone kept the 2 cores about 60 %
# busy). Each worker has its own session lab and lab names: worker gwN adds N to
# LABCTL_TEST_LAB, before any test module reads it. Labs of other names may share a state
# directory (that is what labctl supports), and every leftover check is per lab.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER:
    os.environ["LABCTL_TEST_LAB"] = (os.environ.get("LABCTL_TEST_LAB", "itest")
                                     + _WORKER.removeprefix("gw"))
# Not the file's own name, so a developer's two-node lab is left alone.
LAB_NAME = os.environ.get("LABCTL_TEST_LAB", "itest")

# Modules that share something bigger than a lab run in one worker, one after the other:
# the Docker host VM (one per state directory) and the workloads package's lab.
SHARED_GROUPS = {
    "tests/integration/test_docker_provider.py": "docker-host",
    "tests/integration/test_multihost.py": "docker-host",
    "tests/integration/workloads/": "workloads",
}
# Seconds each group took in a full run (scripts/test.sh prints them at its end; lessons
# 8 to 10, lesson grade's fault and own_kernel's matrix measured alone): the longest go
# first, so that the two workers end together (unknown modules count 60 s).
GROUP_SECONDS = {
    "test_lessons": 950, "docker-host": 353, "workloads": 301, "test_lesson_grade": 280,
    "test_examples": 236, "test_own_kernel": 150, "test_reliability": 152, "test_faults": 136,
    "test_inspector": 133, "test_reliability_lifecycle": 109, "test_siw": 106,
    "test_node_control": 100, "test_restore": 87, "test_workbench_example": 77,
    "test_vagrant_live": 76, "test_package": 59, "test_workbench": 59,
    "test_learning_path": 58, "test_routed": 42, "test_capture": 37,
    "test_lab_core": 32, "test_pairs": 32,
}


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


def run_records(stdout: str) -> list[dict[str, Any]]:
    """The records a `labctl run ... --json` printed: `{"records": [...]}` for one pair as
    for many (docs/json.md: the top level is always an object)."""
    document = json.loads(stdout)
    assert isinstance(document, dict) and list(document) == ["records"], stdout[:2000]
    records: list[dict[str, Any]] = document["records"]
    return records


def only_record(stdout: str) -> dict[str, Any]:
    """The one record of a `labctl run ... --json` between one pair."""
    (record,) = run_records(stdout)
    return record


def passed_run(lab: str, *args: str) -> dict[str, Any]:
    """`labctl run ARGS --lab LAB --json`, which must pass: its (first pair's) record."""
    result = labctl("run", *args, "--lab", lab, "--json", check=True, timeout=300)
    first = run_records(result.stdout)[0]
    assert first["status"] == "passed", result.stdout
    return first



def in_ci() -> bool:
    return bool(os.environ.get("CI")) and os.geteuid() == 0


def worker_group(path: str) -> str:
    """The group of the integration test module at `path` (relative to the repository):
    the module's own name, or the group it shares with others."""
    for prefix, group in SHARED_GROUPS.items():
        if path.startswith(prefix):
            return group
    return Path(path).stem


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """In pytest-xdist's workers, a group at a time per worker, in the order the workers
    collected them (the longest first: below), whatever --dist says: a module's tests share
    its lab. xdist's `loadgroup` cannot say this under this pytest (it renames a test's
    node id through an attribute pytest 9 no longer reads), so a scheduler of our own."""
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid.split("::", 1)[0])

    config.option.loadscopereorder = False
    return ByGroup(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _WORKER:  # the longest groups first; a module's tests stay together, in their order
        order = {id(item): n for n, item in enumerate(items)}

        def key(item: pytest.Item) -> tuple[int, str, int]:
            group = worker_group(item.nodeid.split("::", 1)[0])
            return -GROUP_SECONDS.get(group, 60), group, order[id(item)]

        items.sort(key=key)
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


def host_folders(tmp_path_factory: pytest.TempPathFactory, prefix: str) -> dict[str, Path]:
    """Two host folders for nodes' mounts ("rw" and "ro"), each with a file written on the
    host (from-host.txt: "host rw" / "host ro")."""
    base = tmp_path_factory.mktemp(prefix)
    result = {"rw": base / "rw", "ro": base / "ro"}
    for mode, path in result.items():
        path.mkdir()
        (path / "from-host.txt").write_text(f"host {mode}\n")
    return result


def make_topology(directory: Path, source: str, name: str, **changes: object) -> Path:
    """A shipped topology under another lab name (and other top-level `changes`)."""
    data = yaml.safe_load((REPO / "topologies" / source).read_text())
    data.update(name=name, **changes)
    path = directory / source
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def nothing_left(name: str, removed: list[str]) -> None:
    """After a lab's teardown: it removed something, nothing of the lab is left, and a
    second destroy has nothing to do."""
    assert removed, f"destroy of {name} found nothing to remove"
    assert lab_leftovers(name) == {"netns": [], "qemu": [], "ssh": [], "labdir": []}
    assert lifecycle.destroy(name) == []


@pytest.fixture(scope="session")
def lab_topology(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_topology(tmp_path_factory.mktemp("topology"), "two-node.yaml", LAB_NAME)


@pytest.fixture(scope="session")
def rdma_lab_spec(lab_topology: Path) -> LabSpec:
    """The plugin's session lab, as this suite wants it (overrides the plugin's fixture:
    the --rdma-lab-* options and markers do not apply to the project's own tests)."""
    return LabSpec(lab_topology, LAB_NAME, fresh=True, after_down=nothing_left)


@pytest.fixture(scope="session")
def lab_up(rdma_lab: RdmaLab) -> lifecycle.UpResult:
    assert rdma_lab.up_result is not None  # fresh: made by this session
    return rdma_lab.up_result


@pytest.fixture(scope="session")
def lab_handle(rdma_lab: RdmaLab) -> LabHandle:
    return rdma_lab.handle


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
    left = example_programs_left(request.getfixturevalue("lab_handle"))
    assert not left, f"example programs left running in the shared lab's nodes: {left}"


def example_programs_left(handle: LabHandle) -> dict[str, str]:
    """The example programs still running in the lab's nodes (pgrep's lines, by node), each
    killed."""
    left = {}
    for node in handle.lab.nodes:
        found = handle.run(node.name, ["pgrep", "-a", "-x", EXAMPLE_PROGRAMS], timeout=60)
        if found.returncode == 0 and found.stdout.strip():
            left[node.name] = found.stdout.strip()
            handle.run(node.name, ["pkill", "-KILL", "-x", EXAMPLE_PROGRAMS], timeout=60)
    return left
