"""`labctl lesson grade`: the submissions folder as untrusted input (names, links, hard
links, FIFOs, sizes), the JUnit XML and the table made from verdicts, the fence's shell
text, and the CLI's refusals (exit 2) before any lab is touched. The live grading run is
tests/integration/test_lesson_grade.py."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
from rich.console import Console

from labctl.cli.lesson_grade import RUN_SECONDS, verdict_table
from labctl.course import catalog, check, grade, jail
from labctl.course.judge import Finding
from labctl.errors import UsageError
from labctl.runners.custom import check_template
from tests.unit.clirun import run_main
from tests.unit.jsonshape import parsed


def _folder(root: Path, *students: str) -> Path:
    root.mkdir(exist_ok=True)
    for name in students:
        (root / name).mkdir()
        (root / name / "lesson.c").write_text("int main(void) { return 0; }\n")
    return root


def test_each_folder_is_a_student_by_name_hidden_entries_and_files_left_out(
        tmp_path: Path) -> None:
    root = _folder(tmp_path / "subs", "zoe", "Alice.B", "bob_2", "c-3", ".git")
    (root / "README.txt").write_text("grades\n")
    assert grade.submissions(root) == [grade.Submission("Alice.B"), grade.Submission("bob_2"),
                                       grade.Submission("c-3"), grade.Submission("zoe")]


@pytest.mark.parametrize("name", ["-rf", "a b", "x" * 65, "é", "a\x1b[31mred", "a;id",
                                  "$(id)", "a\nb"])
def test_a_name_that_is_no_student_name_is_refused_and_shown_escaped(
        tmp_path: Path, name: str) -> None:
    root = _folder(tmp_path / "subs", name)
    (found,) = grade.submissions(root)
    assert found.refused.startswith("not a student name")
    assert "\x1b" not in found.student and "\n" not in found.student


def test_a_link_in_submissions_is_refused_never_followed(tmp_path: Path) -> None:
    outside = _folder(tmp_path / "outside", "victim")
    root = _folder(tmp_path / "subs", "alice")
    (root / "mallory").symlink_to(outside / "victim")
    (root / "dangling").symlink_to(tmp_path / "nowhere")
    found = {s.student: s.refused for s in grade.submissions(root)}
    assert found["alice"] == ""
    assert found["mallory"].startswith("a link, not a folder")
    assert found["dangling"].startswith("a link, not a folder")


def test_nothing_to_grade_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="holds no submissions"):
        grade.submissions(_folder(tmp_path / "empty", ".hidden"))
    with pytest.raises(UsageError, match="no folder"):
        grade.submissions(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is not a folder"):
        grade.submissions(tmp_path / "file")


def test_the_source_is_read_without_following_links_and_bounded(tmp_path: Path) -> None:
    root = _folder(tmp_path / "subs", "ok", "link", "hard", "big", "fifo", "none",
                   "dirlink")
    assert grade.read_source(root, "ok", "c") == b"int main(void) { return 0; }\n"
    secret = tmp_path / "secret"
    secret.write_text("root's\n")
    (root / "link" / "lesson.c").unlink()
    (root / "link" / "lesson.c").symlink_to(secret)
    assert grade.read_source(root, "link", "c") == (
        "lesson.c is a link or not a regular file: submit the file itself")
    (root / "hard" / "lesson.c").unlink()
    os.link(secret, root / "hard" / "lesson.c")
    assert grade.read_source(root, "hard", "c") == (
        "lesson.c has 2 hard links: submit a file of its own")
    (root / "big" / "lesson.c").write_bytes(b"x" * (grade.SOURCE_BYTES + 1))
    assert grade.read_source(root, "big", "c") == (
        f"lesson.c has {grade.SOURCE_BYTES + 1} bytes, more than the {grade.SOURCE_BYTES} "
        "allowed")
    (root / "fifo" / "lesson.c").unlink()
    os.mkfifo(root / "fifo" / "lesson.c")  # would block a plain open
    assert grade.read_source(root, "fifo", "c") == (
        "lesson.c is a link or not a regular file: submit the file itself")
    assert grade.read_source(root, "none", "python") == "the submission has no lesson.py"
    # the student's folder swapped for a link after it was listed: still not followed
    (root / "dirlink" / "lesson.c").unlink()
    (root / "dirlink").rmdir()
    (root / "dirlink").symlink_to(root / "ok")
    assert isinstance(grade.read_source(root, "dirlink", "c"), str)


def test_emptying_the_grading_folder_removes_links_never_their_targets(
        tmp_path: Path) -> None:
    keep = _folder(tmp_path / "host", "precious")
    folder = tmp_path / "grading"
    folder.mkdir()
    (folder / "build").mkdir()
    (folder / "build" / "lesson.o").write_bytes(b"\0")
    (folder / "escape").symlink_to(keep)
    (folder / "build" / "escape").symlink_to(keep / "precious")
    grade.empty(folder)
    assert os.listdir(folder) == []
    assert (keep / "precious" / "lesson.c").is_file()


def test_staging_gives_the_student_only_their_program_beside_labctls_files(
        tmp_path: Path) -> None:
    folder = tmp_path / "grading"
    folder.mkdir()
    (folder / "left-by-the-last").write_text("x")
    grade._stage(catalog.lesson(2), "python", b"print('mine')\n", folder)
    assert sorted(os.listdir(folder)) == ["Makefile", "lesson.py", "rdma_common.c",
                                          "rdma_common.h", "rdma_common.py"]
    assert (folder / "lesson.py").read_bytes() == b"print('mine')\n"
    assert (folder / "Makefile").read_bytes() == catalog.files(catalog.lesson(2),
                                                               "starter")["Makefile"]


def _graded() -> list[grade.Graded]:
    return [
        grade.Graded("alice", "pass", [Finding("exit", True, "your program exited 0 (node1)")],
                     31.2),
        grade.Graded("bob", "fail", [
            Finding("exit", True, "your server exited 0 (node1)"),
            Finding("wire", False, "your client sent RC_SEND_ONLY packets\nsecond line"),
            Finding("digest", False, "the server printed no digest")], 40.0),
        grade.Graded("eve", "fail", [Finding("exit", False,
                                             "your program exited 1: \x1b[2J\x00 <&>")], 3.0),
        grade.Graded("a\\x1bb", "error", [Finding("submission", False, "a link, not a "
                                                  "folder")]),
    ]


def test_junit_has_one_testcase_per_student_failures_with_their_findings() -> None:
    data = grade.junit_xml(catalog.lesson(3), "c", _graded())
    suites = ElementTree.fromstring(data)
    assert (suites.get("tests"), suites.get("failures"), suites.get("errors")) == (
        "4", "2", "1")
    suite = suites.find("testsuite")
    assert suite is not None
    assert suite.get("name") == "lesson 3: One-sided RDMA WRITE (c)"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert list(cases) == ["alice", "bob", "eve", "a\\x1bb"]
    assert cases["alice"].find("failure") is None and cases["alice"].get("time") == "31.2"
    failure = cases["bob"].find("failure")
    assert failure is not None
    assert failure.get("message") == "your client sent RC_SEND_ONLY packets"
    assert failure.text == ("PASS  your server exited 0 (node1)\n"
                            "FAIL  your client sent RC_SEND_ONLY packets\nsecond line\n"
                            "FAIL  the server printed no digest")
    # a program's control characters are escaped: the file stays XML a CI server reads
    eve = cases["eve"].find("failure")
    assert eve is not None and eve.get("message") == (
        "your program exited 1: \\x1b[2J\\x00 <&>")
    error = cases["a\\x1bb"].find("error")
    assert error is not None and error.get("message") == "a link, not a folder"


def test_the_junit_file_replaces_a_planted_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    out = tmp_path / "grades.xml"
    out.symlink_to(victim)
    grade.write_junit(out, b"<testsuites/>\n")
    assert victim.read_text() == "keep\n" and not out.is_symlink()
    assert out.read_bytes() == b"<testsuites/>\n"


def test_the_table_has_student_verdict_and_the_first_failing_finding() -> None:
    assert grade.table_rows(_graded()) == [
        ("alice", "PASS", ""),
        ("bob", "FAIL", "your client sent RC_SEND_ONLY packets"),
        ("eve", "FAIL", "your program exited 1: \\x1b[2J\\x00 <&>"),
        ("a\\x1bb", "ERROR", "a link, not a folder")]
    console = Console(record=True, width=100, color_system=None)
    console.print(verdict_table(_graded()))
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    assert lines[0].split() == ["student", "verdict", "first", "failing", "finding"]
    assert lines[2].split()[:3] == ["bob", "FAIL", "your"]
    assert "\x1b" not in console.export_text()
    long = grade.Graded("x", "fail", [Finding("exit", False, "y" * 500)])
    assert len(grade.table_rows([long])[0][2]) == grade.FIRST_FAILURE_CHARS


def test_the_json_names_every_student_with_every_finding() -> None:
    made = grade.output(catalog.lesson(3), "c", "grade", _graded())
    assert (made["passed"], made["failed"]) == (1, 3)
    import json
    parsed("lesson-grade", json.dumps(made))


def test_the_fence_is_plain_sh_that_a_custom_template_takes() -> None:
    # the two-node lessons' commands are `run custom` templates: braces are placeholders
    for lang in ("c", "python"):
        program = check._program(lang)
        assert program.startswith(jail.ENTER)
        check_template(check._marked(f"{program} server -d {{device}}"), "--server-cmd")
    assert f"echo {jail.MAX_PIDS} > {jail.CGROUP}/pids.max" in jail.ENTER
    assert "cgroup.kill" in jail.RELEASE
    assert RUN_SECONDS == check.RUN_SECONDS


def test_cli_refusals_come_before_any_lab(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "state"))
    subs = _folder(tmp_path / "subs", "alice")
    empty = _folder(tmp_path / "empty")
    cases = [
        (["99", str(subs)], "there is no lesson 99"),
        (["1", str(tmp_path / "missing")], "no folder"),
        (["1", str(empty)], "holds no submissions"),
        (["1", str(subs), "--lang", "rust"], "--lang must be c or python"),
        (["1", str(subs), "--timeout", "5"], "--timeout must be a whole number from 10"),
        (["1", str(subs), "--timeout", "601"], "--timeout must be a whole number from 10"),
        (["1", str(subs), "--junit", str(tmp_path / "no" / "x.xml")], "--junit"),
        (["1", str(subs), "--junit", str(tmp_path)], "is a directory"),
        (["1", str(subs), "--lab", "../../etc"], "lab name"),
    ]
    for args, words in cases:
        code, _, err = run_main(monkeypatch, capsys, "lesson", "grade", *args)
        assert code == 2, (args, err)
        assert words in " ".join(err.split()), (args, err)
        assert "Traceback" not in err
    assert not (tmp_path / "state").exists()  # no lab, no grading folder made


def test_a_lesson_fault_left_on_the_lab_stops_the_run_before_the_next_student(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each student must meet the lesson's fault once, whole: a lab that has faults
    before the run is refused, and one whose fault could not be taken off after a student
    grades nobody after them (each student's check takes its fault off, course/check.py)."""
    item = catalog.lesson(9)
    root = _folder(tmp_path / "class", "alice", "bob")
    entries = grade.submissions(root)
    left: list[str] = []
    ran: list[str] = []

    def fake_check(handle: object, lesson: object, lang: str, run_seconds: int) -> object:
        ran.append(lang)
        left.append("the fault of the student before")  # its node did not answer
        raise grade.LabctlError("could not remove fault(s) 1 (their node did not answer)")

    monkeypatch.setattr(grade, "lesson_nodes", lambda handle, lesson: ["node1", "node2"])
    monkeypatch.setattr(grade, "check", fake_check)
    monkeypatch.setattr(grade, "release", lambda handle, nodes: [])
    monkeypatch.setattr(grade, "load_faults", lambda handle: list(left))
    monkeypatch.setattr(grade, "refuse_faults_of_its_own", lambda handle: None)
    (tmp_path / "grading").mkdir()
    graded, broken = grade.grade_all(object(), item, "c", root, entries,  # type: ignore[arg-type]
                                     tmp_path / "grading", 60, lambda line: None)
    assert ran == ["c"]
    assert [(g.student, g.verdict) for g in graded] == [("alice", "fail"), ("bob", "error")]
    assert graded[0].findings[0].text == ("the check did not finish: could not remove "
                                          "fault(s) 1 (their node did not answer)")
    assert broken == "the lesson's fault could not be taken off the lab"

    def refuse(handle: object) -> None:
        raise grade.LabctlError("lab grade has faults on it already")

    monkeypatch.setattr(grade, "refuse_faults_of_its_own", refuse)
    ran.clear()
    with pytest.raises(grade.LabctlError, match="has faults on it already"):
        grade.grade_all(object(), item, "c", root, entries,  # type: ignore[arg-type]
                        tmp_path / "grading", 60, lambda line: None)
    assert ran == []
