"""The workbench example (examples/verbs-send) as a user runs it: its own pytest sessions,
labctl's plugin loaded through its entry point, the lab from the test file's marker.

The first session keeps its lab (--rdma-lab-keep): it builds rc_send in both nodes and runs
the C and pyverbs pairs. The second reuses that lab (no boot) for one test and removes it
at its end. The lab is named after LABCTL_TEST_LAB with "-ex".
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from labctl.lab import lifecycle
from labctl.store.labdir import LabDir
from tests.integration.conftest import REPO
from tests.integration.leftovers import lab_leftovers

pytestmark = pytest.mark.integration
LAB = (os.environ.get("LABCTL_TEST_LAB", "itest") + "-ex")[:20]
EXAMPLE = REPO / "examples" / "verbs-send"
NOTHING = {"netns": [], "qemu": [], "ssh": [], "labdir": []}


def session(tmp_path: Path, *args: str) -> tuple[dict[str, int], str, str]:
    """One pytest session on the example: its counts, skip reasons and whole output."""
    junit = tmp_path / f"junit-{time.monotonic_ns()}.xml"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         f"--junitxml={junit}", "--rdma-lab-name", LAB, *args, str(EXAMPLE)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800,
        stdin=subprocess.DEVNULL, check=False)
    output = result.stdout + result.stderr
    assert junit.exists(), output
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")  # type: ignore[assignment]
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    reasons = " ".join(sorted({s.get("message", "") for s in suite.iter("skipped")}))
    counts["exit"] = result.returncode
    return counts, reasons, output


def test_the_example_builds_and_runs_in_its_own_lab_kept_then_reused(tmp_path: Path) -> None:
    lifecycle.destroy(LAB)  # left by an interrupted earlier run
    try:
        started = time.monotonic()
        counts, _, output = session(tmp_path, "--rdma-lab-keep")
        print(f"first session (boot, build, runs) {time.monotonic() - started:.1f} s")
        assert counts == {"tests": 3, "failures": 0, "errors": 0, "skipped": 0, "exit": 0}, output
        assert f"rdma_lab: lab {LAB} was kept up; `labctl down --lab {LAB}`" in output
        assert LabDir(LAB).exists()

        started = time.monotonic()
        counts, _, output = session(tmp_path, "-s", "-k", "mount")
        print(f"second session (reused lab) {time.monotonic() - started:.1f} s")
        assert counts == {"tests": 1, "failures": 0, "errors": 0, "skipped": 0, "exit": 0}, output
        assert f"rdma_lab {LAB}:" not in output  # -s shows the plugin's progress: none, reused
        assert lab_leftovers(LAB) == NOTHING
    finally:
        lifecycle.destroy(LAB)
