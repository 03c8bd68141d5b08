"""The JSON `labctl lesson list --json` and `labctl lesson check --json` print (docs/json.md)."""

from __future__ import annotations

from typing_extensions import TypedDict  # pydantic reads only this TypedDict on 3.11


class LessonRow(TypedDict):
    number: int
    title: str
    summary: str
    rdma: str  # rxe or siw
    roles: str  # single (one program in one node) or pair (a server and a client)


class LessonListOutput(TypedDict):
    """`labctl lesson list --json`."""

    lessons: list[LessonRow]


class FindingRecord(TypedDict):
    check: str  # build, exit, devinfo, wire, memory, counters, output, fault
    passed: bool
    text: str  # in the learner's terms


class LessonVerdict(TypedDict):
    """`labctl lesson check N --json`."""

    lesson: int
    lang: str  # c or python
    passed: bool  # every finding passed (exit 0)
    findings: list[FindingRecord]
    pcap: str | None  # the run's capture (two-node lessons)
    sent: dict[str, dict[str, int]]  # "client"/"server" -> opcode -> packets


class GradeRow(TypedDict):
    student: str  # the submission's folder name (control characters escaped)
    verdict: str  # pass, fail (a finding failed) or error (not graded)
    seconds: float  # the student's build, run and judging
    findings: list[FindingRecord]  # every one; "submission" or "check" when not judged


class GradeOutput(TypedDict):
    """`labctl lesson grade N DIR --json`."""

    lesson: int
    lang: str  # c or python
    lab: str
    passed: int  # students whose every finding passed
    failed: int  # the others (fail or error): exit 1 when any
    students: list[GradeRow]  # by folder name
