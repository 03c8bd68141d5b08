"""`labctl lesson grade`: every student's submission judged by `lesson check`'s machinery
(course/check.py, course/judge.py), one after the other in one lab.

A submission is a folder in DIR named after its student; its lesson.c or lesson.py
is copied, with labctl's own common files (the Makefile, rdma_common.*), into the grading
folder the lab mounts at /mnt/lesson, checked, and the folder emptied again. Everything a
student gives is untrusted: the folder's name (it reaches the table, the JSON and the
JUnit file), a link in place of a folder or file (labctl runs as root: never followed), a
file too large, a program that crashes, hangs, forks or prints without end (a failed
finding for that student; check.release() kills whatever is left in the nodes)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from xml.etree import ElementTree

from labctl import safefs
from labctl.bounded import printable
from labctl.course import SOURCE
from labctl.course.catalog import Lesson, files
from labctl.course.check import check, lesson_nodes, release
from labctl.course.judge import Finding, judge, passed
from labctl.course.lesson_fault import refuse_faults_of_its_own
from labctl.course.shapes import GradeOutput, GradeRow
from labctl.errors import LabctlError, UsageError
from labctl.lab.handle import LabHandle
from labctl.rdmafault.apply import load_faults
from labctl.store import scratch

# A student's name: it becomes a table cell, a JSON string and a JUnit test case's name.
STUDENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_SUBMISSIONS = 500
SOURCE_BYTES = 1 << 20  # one lesson's program: the solutions are under 10 KiB
GRADING_MIB = 256  # the grading folder's room: a build is a few MiB
HOST_SECONDS = 30.0
FIRST_FAILURE_CHARS = 120  # the table's cell; the JSON and JUnit file have every finding

Verdict = Literal["pass", "fail", "error"]


@dataclass(frozen=True)
class Submission:
    student: str  # the folder's name, printable (a refused one is escaped)
    refused: str = ""  # why it is not graded: a link, a name that is no student name


@dataclass
class Graded:
    student: str
    verdict: Verdict  # pass, fail (a finding failed), error (not graded: a refused entry,
    findings: list[Finding] = field(default_factory=list)  # or a lab that stopped answering)
    seconds: float = 0.0

    @property
    def first_failure(self) -> str:
        return next((f.text for f in self.findings if not f.passed), "")

    def to_record(self) -> GradeRow:
        return {"student": self.student, "verdict": self.verdict,
                "seconds": round(self.seconds, 1),
                "findings": [f.to_dict() for f in self.findings]}


def submissions(folder: Path) -> list[Submission]:
    """The entries of DIR, by name: each folder a submission; a link, or a name
    that is no student name, a refused one (graded "error"); hidden entries and plain
    files (a README, a grade sheet) left out. UsageError (exit 2) when there is nothing to
    grade."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except FileNotFoundError:
        raise UsageError(f"no folder {folder}",
                         hint="give the folder that holds one folder per student") from None
    except NotADirectoryError:
        raise UsageError(f"{folder} is not a folder",
                         hint="give the folder that holds one folder per student") from None
    except OSError as exc:
        raise UsageError(f"cannot read {folder}: {exc.strerror}",
                         hint="give a folder you can read") from None
    found = []
    for entry in entries:
        if entry.name.startswith("."):
            continue
        shown = printable(entry.name).replace("\n", "\\n").replace("\t", "\\t")
        if entry.is_symlink():
            found.append(Submission(shown, "a link, not a folder: a submission must be a "
                                    "folder of its own inside the submissions folder"))
        elif not entry.is_dir(follow_symlinks=False):
            continue
        elif not STUDENT_NAME.match(entry.name):
            found.append(Submission(shown, "not a student name: use letters, digits, '.', "
                                    "'_' and '-', at most 64, starting with a letter or "
                                    "digit"))
        else:
            found.append(Submission(entry.name))
    if not found:
        raise UsageError(f"{folder} holds no submissions",
                         hint="put one folder per student in it, each with its lesson.c "
                         "or lesson.py")
    if len(found) > MAX_SUBMISSIONS:
        raise UsageError(f"{folder} holds {len(found)} submissions, more than "
                         f"{MAX_SUBMISSIONS}", hint="grade them in parts")
    return found


def read_source(folder: Path, student: str, lang: str) -> bytes | str:
    """The student's program, or the finding that says why it cannot be used: missing,
    a link or not a regular file (never followed), hard-linked (it may be any file of the
    host), too large. Read from DIR down without following a link on the way."""
    path = folder / student / SOURCE[lang]
    name = SOURCE[lang]
    try:
        fd = safefs.open_existing(path, folder)
    except FileNotFoundError:
        return f"the submission has no {name}"
    except safefs.NotLabctls:
        return f"{name} is a link or not a regular file: submit the file itself"
    except OSError as exc:
        return f"{name} cannot be read: {exc.strerror}"
    try:
        info = os.fstat(fd)
        if info.st_nlink != 1:
            return f"{name} has {info.st_nlink} hard links: submit a file of its own"
        if info.st_size > SOURCE_BYTES:
            return f"{name} has {info.st_size} bytes, more than the {SOURCE_BYTES} allowed"
        data = os.read(fd, SOURCE_BYTES + 1)
        if len(data) > SOURCE_BYTES:
            return f"{name} has more than the {SOURCE_BYTES} bytes allowed"
        return data
    finally:
        os.close(fd)


def grading_folder(lab: str) -> Path:
    """The host folder a grading lab mounts at /mnt/lesson: one student's files at a time
    (the lab's scratch tmpfs: labctl.store.scratch)."""
    return scratch.scratch_folder(lab)


def make_grading_folder(lab: str) -> Path:
    """The grading folder, made, with a tmpfs of GRADING_MIB mounted on it: a student's
    program, root in its node, writes there through the lab's mount, and must not be able
    to fill the host's disk (it gets ENOSPC; the folder is emptied after each student)."""
    return scratch.make_scratch(lab, GRADING_MIB)


def empty(folder: Path) -> None:
    """Remove everything in `folder` (what a student's files and programs left there): a
    link is removed, never followed (rmtree does not follow links)."""
    with os.scandir(folder) as entries:
        for entry in entries:
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()


def remove_grading_folder(lab: str) -> None:
    """The grading folder and its tmpfs, once the lab that mounted it is down (`down`
    removes them too)."""
    scratch.remove_scratch(lab)


def _stage(item: Lesson, lang: str, source: bytes, folder: Path) -> None:
    """The grading folder holds labctl's common files and the student's program only."""
    empty(folder)
    staged = {name: data for name, data in files(item, "starter").items()
              if name not in SOURCE.values()}
    staged[SOURCE[lang]] = source
    for name, data in staged.items():
        safefs.write_bytes(folder / name, data, folder, 0o644)


def _still_usable(handle: LabHandle, nodes: list[str], student: str) -> str:
    """"" when nothing of `student`'s programs runs on in the nodes and each still runs
    commands (the kill is one), else what is wrong."""
    try:
        left = release(handle, nodes)
    except LabctlError as exc:
        return exc.message
    if left:
        return (f"{', '.join(left)}: {student}'s programs could not be killed, or the node "
                "no longer runs commands")
    return ""


def grade_one(handle: LabHandle, item: Lesson, lang: str, source: bytes, folder: Path,
              run_seconds: int) -> list[Finding]:
    """One student's findings: `lesson check` on their program, staged in `folder`. A
    check that cannot finish (the build past its time, a run that breaks the runner) is
    one failed finding, not the end of the grading run."""
    try:
        _stage(item, lang, source, folder)
        checked = check(handle, item, lang, run_seconds=run_seconds)
        return judge(item, checked.observation)
    except LabctlError as exc:
        return [Finding("check", False, f"the check did not finish: {exc.message}")]
    finally:
        with contextlib.suppress(FileNotFoundError):
            empty(folder)


def grade_all(handle: LabHandle, item: Lesson, lang: str, source_dir: Path,
              entries: list[Submission], folder: Path, run_seconds: int,
              progress: Callable[[str], None]) -> tuple[list[Graded], str]:
    """Every submission graded in turn: the results and, when the lab stopped being
    usable on the way, why (the students after it are "error", not graded)."""
    graded: list[Graded] = []
    nodes = lesson_nodes(handle, item)
    if item.fault is not None:  # every student meets the lesson's fault, and only it
        refuse_faults_of_its_own(handle)
    broken = ""
    for number, entry in enumerate(entries, 1):
        if broken:
            graded.append(Graded(entry.student, "error", [Finding(
                "check", False, f"not graded: the lab stopped answering ({broken})")]))
            continue
        if entry.refused:
            graded.append(Graded(entry.student, "error",
                                 [Finding("submission", False, entry.refused)]))
            continue
        progress(f"{entry.student} ({number} of {len(entries)})")
        started = time.monotonic()
        source = read_source(source_dir, entry.student, lang)
        if isinstance(source, str):
            findings = [Finding("submission", False, source)]
        else:
            findings = grade_one(handle, item, lang, source, folder, run_seconds)
        verdict: Verdict = "pass" if passed(findings) else "fail"
        graded.append(Graded(entry.student, verdict, findings, time.monotonic() - started))
        broken = _still_usable(handle, nodes, entry.student) or _fault_left(handle, item)
    return graded, broken


def _fault_left(handle: LabHandle, item: Lesson) -> str:
    """"" unless the lesson's fault is still on the lab (its node did not answer when it
    was to be taken off): the next student would meet it twice."""
    if item.fault is None:
        return ""
    try:
        left = load_faults(handle)
    except LabctlError as exc:
        return exc.message
    return "the lesson's fault could not be taken off the lab" if left else ""


def output(item: Lesson, lang: str, lab: str, graded: list[Graded]) -> GradeOutput:
    return {"lesson": item.number, "lang": lang, "lab": lab,
            "passed": sum(g.verdict == "pass" for g in graded),
            "failed": sum(g.verdict != "pass" for g in graded),
            "students": [g.to_record() for g in graded]}


def one_line(text: str, limit: int = FIRST_FAILURE_CHARS) -> str:
    """A finding as a table cell: its first line, cut."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[:limit - 1] + "…"


def table_rows(graded: list[Graded]) -> list[tuple[str, str, str]]:
    """(student, verdict, first failing finding) per student, as the table shows them."""
    return [(g.student, g.verdict.upper(), printable(one_line(g.first_failure)))
            for g in graded]


# XML 1.0 has no way to write most control characters, even escaped: a program's output in
# a finding could make the file unreadable to a CI server.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", printable(text))


def junit_xml(item: Lesson, lang: str, graded: list[Graded]) -> bytes:
    """The grading run as JUnit XML: one test suite for the lesson, one test case per
    student, a failing one with its first failing finding as the message and every
    finding as the text; a student not graded (a refused entry, a lab that stopped) is an
    error."""
    suite_name = f"lesson {item.number}: {item.title} ({lang})"
    failures = sum(g.verdict == "fail" for g in graded)
    errors = sum(g.verdict == "error" for g in graded)
    total = sum(g.seconds for g in graded)
    suites = ElementTree.Element("testsuites", tests=str(len(graded)),
                                 failures=str(failures), errors=str(errors),
                                 time=f"{total:.1f}")
    suite = ElementTree.SubElement(suites, "testsuite", name=_xml_text(suite_name),
                                   tests=str(len(graded)), failures=str(failures),
                                   errors=str(errors), time=f"{total:.1f}")
    for g in graded:
        case = ElementTree.SubElement(suite, "testcase", classname=f"lesson{item.number}",
                                      name=_xml_text(g.student), time=f"{g.seconds:.1f}")
        if g.verdict == "pass":
            continue
        tag = "failure" if g.verdict == "fail" else "error"
        problem = ElementTree.SubElement(case, tag, message=_xml_text(one_line(
            g.first_failure, 1000)))
        problem.text = _xml_text("\n".join(
            f"{'PASS' if f.passed else 'FAIL'}  {f.text}" for f in g.findings))
    ElementTree.indent(suites)
    return ElementTree.tostring(suites, encoding="utf-8", xml_declaration=True) + b"\n"


def write_junit(path: Path, data: bytes) -> None:
    """--junit FILE, written as labctl writes every file a user names: a new file renamed
    into place, so a link planted under its name is replaced, never followed."""
    target = Path(os.path.abspath(path))
    try:
        safefs.write_bytes(target, data, target.parent, 0o644)
    except (LabctlError, OSError) as exc:
        why = exc.message if isinstance(exc, LabctlError) else (
            exc.strerror or errno.errorcode.get(exc.errno or 0, str(exc)))
        raise LabctlError(f"cannot write {path}: {why}",
                          hint="give --junit a file in a folder you can write") from None
