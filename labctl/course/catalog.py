"""The shipped lessons: one folder each under labctl/data/lessons (text, starter, solution,
what the check expects), read and validated here. Lessons are labctl's own data, so a
broken one is labctl's bug, found by the unit tests that load them all."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Annotated, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from labctl.errors import LabctlError, UsageError

LESSONS = "labctl.data.lessons"
COMMON = "common"  # the files every lesson's program builds with
_FOLDER = re.compile(r"^(\d{2})-[a-z0-9-]+$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ExitExplain(_Strict):
    """A failed exit whose error output matches `matches` (a regular expression, any case)
    is a known mistake: `says` names it in the learner's terms."""

    matches: str = Field(min_length=1)
    says: str

    @field_validator("matches")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value


class ExitCheck(_Strict):
    """Every program of the lesson exits 0 (always checked, first)."""

    kind: Literal["exit"]
    explains: tuple[ExitExplain, ...] = ()


class DevinfoCheck(_Strict):
    """The program prints `field: value` lines equal to ibv_devinfo -v's."""

    kind: Literal["devinfo"]
    fields: tuple[str, ...] = Field(min_length=1)


class DigestCheck(_Strict):
    """One side's buffer holds the pattern the other side had ("buffer N bytes fnv1a64 H"):
    the server's after a SEND or WRITE, the client's after an RDMA READ."""

    kind: Literal["digest"]
    side: Literal["server", "client"] = "server"
    says: str


class OpcodesCheck(_Strict):
    """Packets one side (the client unless said) put on the wire: one of `any_of` seen, or
    none of `none_of`. `says` is the finding when it fails; {found} is what was seen
    instead."""

    kind: Literal["opcodes"]
    side: Literal["server", "client"] = "client"
    any_of: tuple[str, ...] = ()
    none_of: tuple[str, ...] = ()
    says: str


class CounterCheck(_Strict):
    """A device counter's change over the run on one side (rxe's hw_counters)."""

    kind: Literal["counter"]
    side: Literal["server", "client"]
    name: str
    change: int | None = None  # exactly this change
    at_least: int | None = None  # or at least this one
    says: str


class PrintsCheck(_Strict):
    """One side printed this exact line (a value it got back: an immediate, an atomic's
    original value, its own memory afterwards)."""

    kind: Literal["prints"]
    side: Literal["server", "client"]
    line: str = Field(pattern=r"^\S(.*\S)?$")  # compared with the printed lines stripped
    says: str


class FaultCheck(_Strict):
    """The lesson's fault acted on exactly `hit` packets over the run (the gate's own
    count: a program that gave up early let fewer through to it). `says` is the finding
    when it did not; {found} is the number it acted on."""

    kind: Literal["fault"]
    hit: int = Field(ge=0)
    says: str


class ResentCheck(_Strict):
    """At most `at_most` of one side's packets (the client's unless said) were sent again
    on the wire: the capture's recovery view (labctl.wire.recovery) marks a PSN the
    capture saw before in the same flow. A packet a fault dropped never reaches the
    capture, so what it counts are copies of packets that did arrive: retries the loss did
    not need. {found} is their number."""

    kind: Literal["resent"]
    side: Literal["server", "client"] = "client"
    at_most: int = Field(ge=0)
    says: str


class ConnectCheck(_Strict):
    """The queue pairs were connected by RDMA CM, as the wire shows it: on RoCE the
    client's ConnectRequest (CM_REQ), the server's ConnectReply (CM_REP) and the client's
    ReadyToUse (CM_RTU) on QP1, then the client's data sent to the queue pair the REP named;
    on iWARP the MPA request and reply that turn the TCP connection into an RDMA one. `says`
    (what the lesson wants instead) follows the finding when no connection request was
    seen."""

    kind: Literal["connect"]
    says: str


Check = Annotated[ExitCheck | DevinfoCheck | DigestCheck | OpcodesCheck | CounterCheck
                  | PrintsCheck | FaultCheck | ResentCheck | ConnectCheck,
                  Field(discriminator="kind")]


class LessonFault(_Strict):
    """A `labctl fault` put on for the run and taken off after it (docs/faults.md): on
    what one side's node sends on its RDMA link. Counted, never random, so a check can
    say exactly what it did: no probability and no delay."""

    side: Literal["server", "client"]
    action: Literal["drop", "duplicate", "corrupt"]
    opcodes: tuple[str, ...] = Field(min_length=1)  # classes (write, ack) or names
    count: int | None = Field(default=None, ge=1, le=1000)  # at most this many
    skip: int | None = Field(default=None, ge=0, le=1000)  # after letting these through
    nth: int | None = Field(default=None, ge=1, le=1000)  # or only the n-th
    every: int | None = Field(default=None, ge=1, le=1000)

    @model_validator(mode="after")
    def _one_window(self) -> LessonFault:
        if self.nth is not None and (self.count is not None or self.skip is not None):
            raise ValueError("nth is one packet: it takes no count or skip")
        return self


class Lesson(_Strict):
    number: int
    slug: str
    title: str
    summary: str
    roles: Literal["single", "pair"]  # one program in one node, or a server and a client
    topology: str  # a file in labctl/data/lessons
    rdma: Literal["rxe", "siw"] = "rxe"
    hints: tuple[str, ...] = Field(min_length=1)
    fault: LessonFault | None = None  # on the wire while a pair lesson's programs run
    checks: tuple[Check, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _fault_fits(self) -> Lesson:
        has_check = any(isinstance(c, FaultCheck) for c in self.checks)
        if has_check and self.fault is None:
            raise ValueError("a fault check needs the lesson's fault")
        if self.fault is not None and self.roles != "pair":
            raise ValueError("a fault acts on the wire between a server and a client")
        return self

    @property
    def folder(self) -> str:
        return f"{self.number:02d}-{self.slug}"


def _root() -> Traversable:
    return resources.files(LESSONS)


def _parse(folder: Traversable) -> Lesson:
    match = _FOLDER.match(folder.name)
    assert match is not None
    raw = yaml.safe_load(folder.joinpath("lesson.yaml").read_text())
    number, slug = int(match.group(1)), folder.name[3:]
    try:
        return Lesson.model_validate({**raw, "number": number, "slug": slug})
    except ValidationError as exc:  # labctl's own data: a bug, said plainly
        raise LabctlError(f"lesson {folder.name} is broken: {exc.errors()[0]['msg']} at "
                          f"{exc.errors()[0]['loc']}",
                          hint="reinstall labctl; if it stays, report it") from None


@cache
def lessons() -> tuple[Lesson, ...]:
    folders = sorted((f for f in _root().iterdir() if f.is_dir() and _FOLDER.match(f.name)),
                     key=lambda f: f.name)
    return tuple(_parse(folder) for folder in folders)


def lesson(number: int) -> Lesson:
    """Lesson `number`, or UsageError (exit 2) naming the ones there are."""
    for found in lessons():
        if found.number == number:
            return found
    numbers = ", ".join(str(x.number) for x in lessons())
    raise UsageError(f"there is no lesson {number}",
                     hint=f"the lessons are {numbers}: `labctl lesson list`")


def text(item: Lesson) -> str:
    return _root().joinpath(item.folder).joinpath("lesson.md").read_text()


def topology_file(item: Lesson) -> Traversable:
    return _root().joinpath(item.topology)


def files(item: Lesson, part: Literal["starter", "solution"]) -> dict[str, bytes]:
    """The files a learner's folder gets (`starter`) or the reference answer's, with the
    common ones: name -> content."""
    found: dict[str, bytes] = {}
    for folder in (_root().joinpath(COMMON), _root().joinpath(item.folder).joinpath(part)):
        for entry in folder.iterdir():
            if entry.is_file() and not entry.name.startswith((".", "__")):
                found[entry.name] = entry.read_bytes()
    return dict(sorted(found.items()))
