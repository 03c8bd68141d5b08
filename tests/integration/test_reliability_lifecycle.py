"""Labs of our own, booted and removed here: clean teardown over N cycles, `up` interrupted
or crashed at each of its steps, and two labs side by side.

Lab name: LABCTL_TEST_REL_LAB (default itest-rel); cycles: LABCTL_CYCLES (default 3; the
20-cycle figure in docs/reliability.md comes from benchmarks/cycles.py, the same code).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.cycles import host_snapshot, lab_snapshot, lab_topology, leaks, run_cycles
from labctl.lab.handle import LabHandle
from labctl.store.labdir import LabDir
from labctl.testpoints import STEPS
from tests.integration.conftest import LAB_NAME, REPO, labctl, only_record

pytestmark = pytest.mark.integration
LAB = os.environ.get("LABCTL_TEST_REL_LAB", "itest-rel")
CYCLES = int(os.environ.get("LABCTL_CYCLES", "3"))
NOTHING = {"netns": [], "links in netns": [], "qemu": [], "ssh masters": [], "ssh sessions": [],
           "lab dir": [], "lock": []}


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lab_topology(LAB, tmp_path_factory.mktemp("rel"))


@pytest.fixture(autouse=True)
def no_lab_before_or_after() -> Iterator[None]:
    labctl("down", "--lab", LAB)  # what an interrupted earlier run left
    assert lab_snapshot(LAB) == NOTHING
    yield
    labctl("down", "--lab", LAB)


def _status(lab: str = LAB) -> tuple[int, dict[str, object], str]:
    result = labctl("status", "--lab", lab, "--json", timeout=120)
    labs = json.loads(result.stdout or '{"labs": [{}]}')["labs"]
    return result.returncode, labs[0], result.stderr


def _honest_then_clean(up_stderr: str) -> dict[str, str]:
    """After a failed up: status exits 1 and says why; down removes every trace."""
    code, status, err = _status()
    assert code == 1, (status, err)
    states = {n["name"]: n["state"] for n in status["nodes"]}  # type: ignore[index]
    assert status["phase"] != "up"
    assert "`up` did not finish" in " ".join(err.split())
    for node in status["nodes"]:  # type: ignore[attr-defined]
        if node["state"] != "running":
            assert node["reason"] or node["state"] == "booting", node
    down = labctl("down", "--lab", LAB, timeout=120)
    assert down.returncode == 0, down.stderr
    assert lab_snapshot(LAB) == NOTHING, up_stderr
    return states


# --- 1. clean teardown ---------------------------------------------------------------------


def test_up_down_cycles_leave_nothing() -> None:
    lines: list[str] = []
    figures = run_cycles(CYCLES, LAB, report=lines.append)
    assert figures["cycles"] == CYCLES
    assert figures["leaks"] == [], "\n".join(lines)


# --- 2. up interrupted (SIGINT) and up crashed at each step ----------------------------------

# the progress line of `up` on which Ctrl-C comes
SIGINT_AT = {
    "start": re.compile(r"checking cache"),  # its first line
    "qemu": re.compile(r"node1: starting qemu"),
    "booting": re.compile(r"booting \(.*node2 (modules|network|sshd)"),  # node2 half-way
}


@pytest.mark.parametrize("when", list(SIGINT_AT))
def test_sigint_during_up(when: str, topology: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "labctl", "up", str(topology)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, stdin=subprocess.DEVNULL)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if SIGINT_AT[when].search(line):
            proc.send_signal(signal.SIGINT)
            seen += list(proc.stderr)  # up to labctl's last word
    assert proc.wait(timeout=60) == 130, "".join(seen)
    # what was made, and the command that removes only that (never a bare `labctl down`)
    assert seen[-1].startswith("interrupted; ") and f"`labctl down --lab {LAB}`" in seen[-1]
    _honest_then_clean("".join(seen))


CHEAP = STEPS[: STEPS.index("launched") + 1]  # before any node has to boot


@pytest.mark.parametrize("mode", ["raise", "kill"])
@pytest.mark.parametrize("step", CHEAP)
def test_crash_at_each_step_of_up(step: str, mode: str, topology: Path) -> None:
    _crash_and_check(f"{step}:{mode}" if step not in ("disk", "qemu-started", "launched")
                     else f"{step}@node2:{mode}", mode, topology)


@pytest.mark.parametrize("fault", ["booted:kill", "master@node2:raise"])
def test_crash_after_the_nodes_booted(fault: str, topology: Path) -> None:
    states = _crash_and_check(fault, fault.rsplit(":", 1)[1], topology)
    assert states == {"node1": "running", "node2": "running"}  # but `up` never finished


def _crash_and_check(fault: str, mode: str, topology: Path) -> dict[str, str]:
    env = {**os.environ, "LABCTL_FAULT": fault}
    up = subprocess.run([sys.executable, "-m", "labctl", "up", str(topology)], env=env,
                        capture_output=True, text=True, cwd=REPO, timeout=600,
                        stdin=subprocess.DEVNULL)
    if mode == "kill":
        assert up.returncode == -signal.SIGKILL, up.stderr
    else:
        assert up.returncode == 1, up.stderr
        assert "fault injected at" in up.stderr
        assert "labctl down --lab" in up.stderr
    return _honest_then_clean(up.stderr)


# --- 3. two labs at once; the lock ---------------------------------------------------------


def test_two_labs_side_by_side_and_the_lock(topology: Path, lab_handle: LabHandle,
                                            tmp_path: Path) -> None:
    other = LabDir(LAB_NAME).load_state()
    other_pids = {n: i.pid for n, i in other.nodes.items()}
    host_before = host_snapshot()
    # The first `up` holds its lock once the nodes are ready until the checks below are
    # done: a restored lab is up in seconds, before a second labctl could find it busy.
    release = tmp_path / "release"
    env = {**os.environ, "LABCTL_FAULT": "booted:hold", "LABCTL_FAULT_RELEASE": str(release)}
    proc = subprocess.Popen([sys.executable, "-m", "labctl", "up", str(topology)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, stdin=subprocess.DEVNULL, env=env)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "booting (" in line:
            break
    drain = threading.Thread(target=proc.stderr.read, daemon=True)
    drain.start()
    second = labctl("up", str(topology), timeout=60)
    assert second.returncode == 1
    assert f"lab {LAB} is busy (up by pid {proc.pid})" in " ".join(second.stderr.split())
    down_meanwhile = labctl("down", "--lab", LAB, timeout=60)
    assert down_meanwhile.returncode == 1 and "is busy" in down_meanwhile.stderr
    release.touch()
    assert proc.wait(timeout=600) == 0
    again = labctl("up", str(topology), timeout=60)
    assert again.returncode == 0 and "already up" in again.stdout

    ours = LabDir(LAB).load_state()
    ports = [i.ssh_port for s in (ours, other) for i in s.nodes.values()]
    assert len(set(ports)) == 4
    macs = [a for s in (ours, other) for i in s.nodes.values()
            for a in i.argv if a.startswith("virtio-net-pci")]
    assert len(macs) == 8 and len(set(macs)) == 8  # management and data NIC MACs, per lab
    assert ours.netns != other.netns
    names = [set(lab_snapshot(n)["links in netns"]) for n in (LAB, LAB_NAME)]
    assert names[0] == names[1] == {"br0", "t1-eth1", "t2-eth1"}  # same names, own netns
    assert not leaks(host_before, host_snapshot())  # nothing of either lab on the host

    runs = [subprocess.Popen([sys.executable, "-m", "labctl", "run", "pingpong", "--lab", lab,
                              "--iters", "100", "--json"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=REPO)
            for lab in (LAB, LAB_NAME)]
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        assert only_record(out)["status"] == "passed"

    assert labctl("down", "--lab", LAB).returncode == 0
    assert lab_snapshot(LAB) == NOTHING
    after = LabDir(LAB_NAME).load_state()
    assert {n: i.pid for n, i in after.nodes.items()} == other_pids
    assert _status(LAB_NAME)[0] == 0
