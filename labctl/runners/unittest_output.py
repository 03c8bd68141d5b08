"""Python unittest's verbose output (`-v`) read back test by test: what each test ended as
(passed, failed, errored, skipped with its reason), the closing summary (Ran N tests, OK or
FAILED with counts) and the last line of each failure's traceback.

The output comes from a node: it is data, read line by line, bounded, and whatever does not
fit the format is left out rather than guessed at. A test's own prints can land between its
name and its status, so a status is also taken from a later line while a test is open.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from labctl.bounded import parse_float, parse_int

TestStatus = Literal["passed", "failed", "errored", "skipped"]
MAX_LINES = 200_000  # a module prints a few hundred lines; past this the rest is ignored
MAX_REASON = 300  # characters kept of a skip reason or a failure's last line
MAX_TESTS = 10_000

# "test_name (tests.test_mod.Class.test_name)" or "... (tests.test_mod.Class)" (Python
# before 3.11 puts only the class there), maybe followed by " ... STATUS" on the same line.
_HEADER = re.compile(r"^(?P<name>[A-Za-z_]\w*) \((?P<where>[A-Za-z_][\w.]*)\)"
                     r"(?: \[(?P<sub>[^\]]*)\]| \((?P<params>[^)]*)\))?(?P<rest>.*)$")
# What unittest writes after " ... " (TextTestResult): the status words it knows. After a
# test's own prints the word starts a line of its own.
_WORD = r"(?P<word>ok|FAIL|ERROR|skipped|expected failure|unexpected success)"
_STATUS_AFTER = re.compile(r"\.\.\. " + _WORD + r"(?: (?P<reason>.+))?$")
_STATUS_ALONE = re.compile(r"^" + _WORD + r"(?: (?P<reason>.+))?$")
_RAN = re.compile(r"^Ran (?P<count>\d+) tests? in (?P<secs>[0-9.]+)s$")
_VERDICT = re.compile(r"^(?P<word>OK|FAILED)(?: \((?P<counts>[^)]*)\))?$")
_DETAIL = re.compile(r"^(?P<kind>FAIL|ERROR): (?P<name>[A-Za-z_]\w*) "
                     r"\((?P<where>[A-Za-z_][\w.]*)\)")
_SEPARATOR = re.compile(r"^(?:={20,}|-{20,})$")
_WORDS: dict[str, TestStatus] = {"ok": "passed", "FAIL": "failed", "ERROR": "errored",
                                 "skipped": "skipped", "expected failure": "passed",
                                 "unexpected success": "failed"}


@dataclass
class TestResult:
    """One test as unittest reported it."""

    test: str  # "Class.test_name" (the module is the run's)
    status: TestStatus
    reason: str = ""  # a skip's reason, or the last line of a failure's traceback


@dataclass
class UnittestOutput:
    """What one unittest run printed, as far as it could be read."""

    tests: list[TestResult] = field(default_factory=list)
    ran: int | None = None  # "Ran N tests"; None: the summary never came
    seconds: float | None = None
    verdict: str = ""  # "OK", "FAILED" or "" (none printed)
    counts: dict[str, int] = field(default_factory=dict)  # failures, errors, skipped...

    def count(self, status: TestStatus) -> int:
        return sum(t.status == status for t in self.tests)


def _short(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_REASON else text[:MAX_REASON] + "…"


def _skip_reason(raw: str | None) -> str:
    """unittest writes a skip's reason as repr(): 'text' or "text"; the text inside."""
    raw = (raw or "").strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        raw = raw[1:-1]
    return _short(raw)


def test_name(where: str, name: str) -> str:
    """"Class.test" from unittest's "(tests.test_mod.Class.test)" or "(tests.test_mod.Class)"
    (the part after the module's name)."""
    parts = where.split(".")
    if parts[-1] == name:
        parts = parts[:-1]
    cls = parts[-1] if len(parts) >= 2 else ""
    return f"{cls}.{name}" if cls else name


def parse_unittest(text: str) -> UnittestOutput:
    """The results a `python -m unittest -v`-style run printed (see the module's doc)."""
    out = UnittestOutput()
    lines = text.splitlines()[:MAX_LINES]
    by_name: dict[str, TestResult] = {}
    pending: str | None = None  # the test whose status has not been printed yet
    index = 0
    while index < len(lines):
        line = lines[index].rstrip()
        index += 1
        if _SEPARATOR.match(line) and index < len(lines) and _DETAIL.match(lines[index]):
            index = _read_detail(lines, index, by_name)
            pending = None
            continue
        header = _HEADER.match(line)
        if header and not _RAN.match(line):
            pending = test_name(header["where"], header["name"])
            if header["sub"] is not None or header["params"] is not None:
                pending += f" [{header['sub'] or header['params']}]"
            line = header["rest"]
        status = _status(line) if pending else None
        if status is not None and pending is not None:
            word, reason = status
            _record(out, by_name, TestResult(pending, _WORDS[word], reason))
            pending = None
            continue
        ran = _RAN.match(line)
        if ran:
            try:  # a summary whose numbers do not read is no summary: "no-result"
                out.ran, out.seconds = (parse_int(ran["count"], "tests ran"),
                                        parse_float(ran["secs"], "seconds"))
            except ValueError:
                out.ran = out.seconds = None
            pending = None
            continue
        verdict = _VERDICT.match(line)
        if verdict and out.ran is not None:
            out.verdict = verdict["word"]
            out.counts = _counts(verdict["counts"] or "")
    return out


def _status(line: str) -> tuple[str, str] | None:
    """(status word, skip reason) when `line` ends a test's verbose line, else None."""
    match = _STATUS_AFTER.search(line) or _STATUS_ALONE.match(line)
    if match is None or (match["reason"] and match["word"] != "skipped"):
        return None
    return match["word"], _skip_reason(match["reason"])


def _record(out: UnittestOutput, by_name: dict[str, TestResult], result: TestResult) -> None:
    if result.test in by_name or len(out.tests) >= MAX_TESTS:
        return
    by_name[result.test] = result
    out.tests.append(result)


def _read_detail(lines: list[str], index: int, by_name: dict[str, TestResult]) -> int:
    """A "FAIL: test (where)" block: its traceback's last line becomes the test's reason.
    Returns the index of the line after the block."""
    detail = _DETAIL.match(lines[index])
    assert detail is not None
    name = test_name(detail["where"], detail["name"])
    index += 1
    last = ""
    while index < len(lines) and not (_SEPARATOR.match(lines[index].rstrip())
                                      and index + 1 < len(lines)
                                      and (_DETAIL.match(lines[index + 1])
                                           or _RAN.match(lines[index + 1].rstrip()))):
        if lines[index].strip() and not _SEPARATOR.match(lines[index].rstrip()):
            last = lines[index]
        index += 1
    result = by_name.get(name)
    if result is not None and not result.reason:
        result.reason = _short(last)
    return index


def _counts(text: str) -> dict[str, int]:
    """"failures=1, errors=2, skipped=3" -> {"failures": 1, ...}; what is not that, left out."""
    counts: dict[str, int] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if sep and key.replace(" ", "_").isidentifier() and value.isdigit() and len(value) < 9:
            counts[key.replace(" ", "_")] = int(value)
    return counts
