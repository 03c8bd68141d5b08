"""`labctl lesson grade` as an instructor meets it: a folder of submissions (the solution,
the starter, a wrong answer, a program that never exits and forks a child of its own
session, one that segfaults, one that prints 100 MB, one that writes until the disk is
full, and entries that are no submission)
graded in one run in one lab with the right verdict each, in a bounded time, and the lab
still usable afterwards (an RC pingpong passes in it). In Python: no gcc per student under
TCG, the same fence and kill as C programs.

One lab (named after LABCTL_TEST_LAB with "-grd"), brought up by the grade run (--keep)."""

from __future__ import annotations

import json
import os
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from pathlib import Path

import pytest

from labctl.course.grade import GRADING_MIB, grading_folder, remove_grading_folder
from labctl.lab import lifecycle
from tests.integration.conftest import REPO, labctl
from tests.integration.leftovers import lab_leftovers
from tests.unit.jsonshape import parsed

pytestmark = pytest.mark.integration
LAB = (os.environ.get("LABCTL_TEST_LAB", "itest") + "-grd")[:20]
LESSON = REPO / "labctl" / "data" / "lessons" / "01-device"
TIMEOUT = 90  # each program's bound: pyverbs' import is 16-26 s under TCG, more when busy
PROGRAMS = {
    "hangs": "import os, time\nif os.fork() == 0:\n    os.setsid()\nwhile True:\n"
             "    time.sleep(1)\n",
    "segfaults": "import ctypes\nctypes.string_at(0)\n",
    "fills": "data = b'x' * (1 << 20)\nn = 0\nwhile True:\n"
             "    with open(f'/mnt/lesson/fill{n}', 'wb') as out:\n"
             "        for _ in range(32):\n            out.write(data)\n    n += 1\n",
    "floods": "import sys\nline = 'x' * 1023 + '\\n'\nfor _ in range(102400):\n"
              "    sys.stdout.write(line)\n",
}


@pytest.fixture(scope="module", autouse=True)
def grade_lab() -> Iterator[None]:
    lifecycle.destroy(LAB)  # left by an interrupted earlier run
    yield
    lifecycle.destroy(LAB)
    remove_grading_folder(LAB)
    assert lab_leftovers(LAB) == {"netns": [], "qemu": [], "ssh": [], "labdir": []}


def submit(root: Path, student: str, text: str) -> None:
    (root / student).mkdir()
    (root / student / "lesson.py").write_text(text)


def test_a_class_is_graded_in_one_run_and_the_lab_stays_usable(tmp_path: Path) -> None:
    root = tmp_path / "submissions"
    root.mkdir()
    solution = (LESSON / "solution" / "lesson.py").read_text()
    submit(root, "alice", solution)
    submit(root, "bob", (LESSON / "starter" / "lesson.py").read_text())
    right = 'print(f"max_cqe: {dev.max_cqe}")'
    assert solution.count(right) == 1
    submit(root, "carol", solution.replace(right, 'print(f"max_cqe: {dev.max_cqe + 1}")'))
    submit(root, "dave", PROGRAMS["hangs"])
    submit(root, "erin", PROGRAMS["segfaults"])
    submit(root, "frank", PROGRAMS["floods"])
    submit(root, "gina", PROGRAMS["fills"])
    (root / "mallory").symlink_to("/etc")  # a link: never followed
    (root / "oscar").mkdir()
    (root / "oscar" / "lesson.py").symlink_to("/etc/shadow")
    (root / "README.txt").write_text("not a submission\n")
    junit = tmp_path / "grades.xml"

    started = time.monotonic()
    result = labctl("lesson", "grade", "1", str(root), "--lang", "python", "--lab", LAB,
                    "--keep", "--timeout", str(TIMEOUT), "--junit", str(junit), "--json",
                    timeout=1800)
    seconds = time.monotonic() - started
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and result.stdout, result.stderr
    graded = parsed("lesson-grade", result.stdout)
    rows = {row["student"]: row for row in graded["students"]}
    verdicts = {name: row["verdict"] for name, row in rows.items()}
    assert verdicts == {"alice": "pass", "bob": "fail", "carol": "fail", "dave": "fail",
                        "erin": "fail", "frank": "fail", "gina": "fail", "mallory": "error",
                        "oscar": "fail"}, result.stdout
    assert (graded["passed"], graded["failed"]) == (1, 8)

    def first(name: str) -> str:
        return next(f["text"] for f in rows[name]["findings"] if not f["passed"])

    assert first("bob") == ("your program exited 1: TODO: query the device's attributes "
                            "(ctx.query_device())")
    assert first("carol").startswith("max_cqe: yours is ")
    assert first("dave") == f"your program did not finish (node1): no exit within {TIMEOUT} s"
    assert first("erin").startswith("your program exited 139")
    assert rows["frank"]["findings"][0]["check"] == "exit"
    # the grading folder is a tmpfs: a program that fills it fills no host disk
    assert first("gina").endswith("No space left on device"), first("gina")
    assert first("mallory").startswith("a link, not a folder")
    assert first("oscar") == "lesson.py is a link or not a regular file: submit the file itself"
    # each student within the program's bound plus the judging around it
    assert all(row["seconds"] < TIMEOUT + 60 for row in rows.values()), rows
    print(f"graded 9 submissions in {seconds:.0f} s: "
          + ", ".join(f"{n} {r['seconds']:.0f} s" for n, r in rows.items()))

    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "9"
    assert (suite.get("failures"), suite.get("errors")) == ("7", "1")

    # nothing of dave's runs on, the grading folder is empty, and the lab still works
    assert os.listdir(grading_folder(LAB)) == []
    assert os.path.ismount(grading_folder(LAB))  # a tmpfs of GRADING_MIB
    assert os.statvfs(grading_folder(LAB)).f_blocks * os.statvfs(
        grading_folder(LAB)).f_frsize == GRADING_MIB << 20
    left = labctl("exec", "--lab", LAB, "node1", "--", "sh", "-c",
                  "cat /sys/fs/cgroup/labctl-lesson/cgroup.procs", timeout=120)
    assert left.returncode == 0 and left.stdout.strip() == "", left.stdout + left.stderr
    ping = labctl("run", "pingpong", "--lab", LAB, "--iters", "3", "--size", "64",
                  timeout=300)
    assert ping.returncode == 0, ping.stdout + ping.stderr


def test_a_lesson_with_a_fault_has_it_on_for_each_student_and_off_after(
        tmp_path: Path) -> None:
    """Lesson 9 drops the client's first 12 WRITE packets. alice (the starter) gives up
    after two tries; bob (the solution) after her meets the whole fault again, a new one
    (the one alice met had only a few drops left), and the lab has no fault after the
    run. In the lab the first test kept (or a new one)."""
    lesson = REPO / "labctl" / "data" / "lessons" / "09-retry-timeout"
    root = tmp_path / "retry"
    root.mkdir()
    submit(root, "alice", (lesson / "starter" / "lesson.py").read_text())
    submit(root, "bob", (lesson / "solution" / "lesson.py").read_text())
    started = time.monotonic()
    result = labctl("lesson", "grade", "9", str(root), "--lang", "python", "--lab", LAB,
                    "--keep", "--timeout", str(TIMEOUT), "--json", timeout=1800)
    seconds = time.monotonic() - started
    assert result.returncode == 1, result.stdout + result.stderr
    rows = {row["student"]: row for row in parsed("lesson-grade", result.stdout)["students"]}
    assert {name: row["verdict"] for name, row in rows.items()} == {
        "alice": "fail", "bob": "pass"}, result.stdout
    alice = [f["text"] for f in rows["alice"]["findings"] if not f["passed"]]
    assert any("transport retry counter exceeded: your client's QP sent its WRITE" in t
               for t in alice), alice
    assert any(t.startswith("the fault dropped ") for t in alice), alice
    assert "the fault (drop write count=12) acted on 12 packets" in [
        f["text"] for f in rows["bob"]["findings"]], rows["bob"]
    listed = labctl("fault", "list", "--lab", LAB, "--json", timeout=120)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert json.loads(listed.stdout)["faults"] == []
    print(f"graded lesson 9 (2 submissions) in {seconds:.0f} s: "
          + ", ".join(f"{n} {r['seconds']:.0f} s" for n, r in rows.items()))
