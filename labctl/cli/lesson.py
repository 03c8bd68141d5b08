"""`labctl lesson`: exercises a learner writes (C or Python), checked from the outside."""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from labctl import bounded, safefs
from labctl.cli import complete
from labctl.cli.common import (
    HELP_SETTINGS,
    console,
    err_console,
    int_range,
    progress_reporter,
)
from labctl.cli.safeprint import print_json
from labctl.course import LANGS, SOURCE
from labctl.errors import LabctlError, UsageError

if TYPE_CHECKING:  # the lessons (pydantic models, yaml) load only when a lesson command runs
    from labctl.course.catalog import Lesson
    from labctl.course.check import Checked
    from labctl.course.shapes import LessonListOutput, LessonVerdict

DEFAULT_LAB = "lesson"
MARKER = ".lesson"  # in the learner's folder: which lesson it holds, hints seen
MARKER_BYTES = 4096

lesson_app = typer.Typer(help="RDMA exercises you write, checked on the wire "
                         "(docs/course.md).", no_args_is_help=True,
                         context_settings=HELP_SETTINGS)

NumberArgument = typer.Argument(..., metavar="LESSON",
                                help="The lesson's number (`lesson list`).")
LessonLabOption = typer.Option(DEFAULT_LAB, "--lab", metavar="NAME",
                               help="The lesson lab's name.")
LangOption = typer.Option("c", "--lang", metavar="c|python",
                          autocompletion=complete.choices(*LANGS),
                          help="Which of your programs to check: lesson.c or lesson.py.")


def _lang(value: str) -> str:
    if value not in LANGS:
        raise UsageError(f"--lang must be c or python (got {value!r})",
                         hint="c checks lesson.c (built with make), python checks lesson.py")
    return value


@lesson_app.command("list")
def list_lessons(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Every lesson: number, title, what it teaches."""
    from labctl.course.catalog import lessons

    if as_json:
        listed: LessonListOutput = {"lessons": [
            {"number": x.number, "title": x.title, "summary": x.summary, "rdma": x.rdma,
             "roles": x.roles} for x in lessons()]}
        print_json(listed)
        return
    for x in lessons():
        console.print(f"{x.number:>2}  {x.title}", highlight=False)
        console.print(f"    {x.summary}", highlight=False, style="dim")


@lesson_app.command("show")
def show(number: int = NumberArgument) -> None:
    """The lesson's text: what to write and how it is checked."""
    from labctl.course.catalog import lesson, text

    console.print(text(lesson(number)), markup=False, highlight=False)


def _read_marker(folder: Path) -> dict[str, int]:
    """The folder's marker ({"lesson": N, "hints": K}); {} when absent or unreadable (the
    learner's own file: a bad one only resets the hint count). Read bounded, and never
    through a link or from a FIFO (one would block the read)."""
    try:
        data = bounded.load_object(bounded.read_text(folder / MARKER, MARKER_BYTES),
                                   limit=MARKER_BYTES)
    except (OSError, ValueError):  # BoundedError is a ValueError
        return {}
    return {k: v for k, v in data.items()
            if k in ("lesson", "hints") and isinstance(v, int) and 0 <= v < 1000}


def _write(folder: Path, name: str, data: bytes) -> None:
    """A file labctl writes into the learner's folder: a new file renamed into place, so a
    link planted under its name is replaced, never followed (labctl runs as root)."""
    try:
        safefs.write_bytes(folder / name, data, folder, 0o644)
    except (LabctlError, OSError) as exc:
        why = exc.message if isinstance(exc, LabctlError) else exc.strerror
        raise LabctlError(f"cannot write {folder / name}: {why}",
                          hint="the lesson folder must be writable") from None


def _write_marker(folder: Path, values: dict[str, int]) -> None:
    _write(folder, MARKER, (json.dumps(values) + "\n").encode())


@lesson_app.command("hint")
def hint(number: int = NumberArgument,
         folder: Path = typer.Option(Path("."), "--dir", metavar="DIR",
                                     help="Your lesson folder (it counts the hints seen)."),
         which: int = typer.Option(None, "--number", metavar="HINT",
                                   callback=int_range("--number", 1, 99),
                                   help="That hint instead of the next one.")) -> None:
    """The next hint for the lesson, one at a time (counted in your lesson folder)."""
    from labctl.course.catalog import lesson

    item = lesson(number)
    if which is not None and not 1 <= which <= len(item.hints):
        raise UsageError(f"lesson {number} has hints 1 to {len(item.hints)} (got {which})",
                         hint="leave --number out for the next one")
    marker = _read_marker(folder) if folder.is_dir() else {}
    counted = marker.get("lesson") == number
    if which is None:
        which = min(marker.get("hints", 0) + 1, len(item.hints)) if counted else 1
    console.print(f"hint {which} of {len(item.hints)}: {item.hints[which - 1]}",
                  markup=False, highlight=False, soft_wrap=True)
    if counted and which > marker.get("hints", 0):
        _write_marker(folder, {**marker, "hints": which})
    if not counted and which == 1:
        err_console.print(f"(run it in your lesson {number} folder, or give --dir, to get "
                          "the next hint each time)", highlight=False)


def _copy_starter(item: Lesson, folder: Path) -> tuple[list[str], list[str]]:
    """The starter's and the common files into `folder`; a file that is there is kept (it
    may be the learner's work). The names copied and the names kept."""
    from labctl.course.catalog import files

    marker = _read_marker(folder)
    if marker.get("lesson") not in (None, item.number):
        raise UsageError(f"{folder} holds lesson {marker['lesson']}'s files",
                         hint=f"give lesson {item.number} a folder of its own")
    copied, kept = [], []
    for name, content in files(item, "starter").items():
        target = folder / name
        if target.exists() or target.is_symlink():
            kept.append(name)
            continue
        _write(folder, name, content)
        copied.append(name)
    if not marker:
        _write_marker(folder, {"lesson": item.number, "hints": 0})
    return copied, kept


@lesson_app.command("start")
def start(number: int = NumberArgument,
          folder: Path = typer.Argument(..., metavar="DIR",
                                        help="Your folder for the lesson (made if missing)."),
          lab: str = LessonLabOption) -> None:
    """Copy the lesson's starter into DIR and bring its lab up with DIR at /mnt/lesson."""
    from labctl.course.catalog import lesson, topology_file
    from labctl.course.check import NODE_DIR
    from labctl.lab import lifecycle
    from labctl.lab.handle import open_lab
    from labctl.lab.labs import lab_made

    item = lesson(number)
    folder = Path(os.path.realpath(folder))  # as the lab records its mounts: links resolved
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder} is not a folder", hint="give a folder for the lesson")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LabctlError(f"cannot make {folder}: {exc.strerror}",
                          hint="choose a folder you can write") from None
    copied, kept = _copy_starter(item, folder)
    if copied:
        console.print(f"copied {', '.join(copied)} into {folder}", highlight=False)
    if kept:
        console.print(f"kept your {', '.join(kept)}", highlight=False)
    recreate = False
    if lab_made(lab):
        from labctl.course.check import mounted_folder

        try:
            recreate = mounted_folder(open_lab(lab)) != str(folder)
        except UsageError:
            recreate = True
        if recreate:
            console.print(f"lab {lab} holds another folder: making it again with {folder}",
                          highlight=False)
    options = lifecycle.UpOptions(mounts=(f"{folder}:{NODE_DIR}",), name=lab,
                                  recreate=recreate)
    options.check()
    with resources.as_file(topology_file(item)) as topology, \
            progress_reporter(f"lesson {number}") as progress:
        result = lifecycle.up(topology, options, progress)
    state = "already up" if result.already_up else f"up in {result.seconds:.1f} s"
    console.print(f"[bold green]lab {lab} is {state}[/]: nodes "
                  f"{', '.join(n.name for n in result.lab.nodes)}, {folder} at {NODE_DIR}",
                  highlight=False)
    console.print(f"next: write the TODOs in {folder / 'lesson.c'} (or lesson.py), then "
                  f"`labctl lesson check {number}" + (f" --lab {lab}" if lab != DEFAULT_LAB
                                                       else "") + "`", soft_wrap=True,
                  highlight=False)


MAX_LADDER_LINES = 40


def _ladder_lines(checked: Checked) -> list[str]:
    """The run's packets as text: the client's on the left, the server's on the right."""
    client = checked.client_address
    lines = [f"  {client} ({checked.client}, client)  ->  {checked.server_address} "
             f"({checked.server}, server)"]
    for frame in checked.frames[:MAX_LADDER_LINES]:
        arrow = "──▶" if frame.src == client else "◀──"
        lines.append(f"    {arrow} {frame.label}"
                     + (f"  [{frame.recovery}]" if frame.recovery else ""))
    if len(checked.frames) > MAX_LADDER_LINES:
        lines.append(f"    ... {len(checked.frames) - MAX_LADDER_LINES} more packets "
                     "(--ladder FILE draws them all)")
    return lines


@lesson_app.command("check")
def check_command(number: int = NumberArgument,
                  folder: Path = typer.Argument(None, metavar="DIR",
                                                help="Your lesson folder (default: the one "
                                                "the lesson lab mounts)."),
                  lang: str = LangOption,
                  lab: str = LessonLabOption,
                  ladder: Path = typer.Option(None, "--ladder", metavar="FILE.png|FILE.svg",
                                              help="Also draw the run's packets as a "
                                              "ladder."),
                  as_json: bool = typer.Option(False, "--json", help="Print the verdict as "
                                               "JSON.")) -> None:
    """Build and run your program in the lesson's lab and judge it from the outside: its
    exit and output, the packets on the wire, the devices' counters. Exit 0 only when
    every finding passes."""
    from labctl.course import judge
    from labctl.course.catalog import lesson
    from labctl.course.check import check, mounted_folder
    from labctl.lab.handle import open_lab
    from labctl.wire.ladder import check_ladder_file

    item = lesson(number)
    lang = _lang(lang)
    if ladder is not None:
        check_ladder_file(ladder)
    handle = open_lab(lab)
    mounted = mounted_folder(handle)
    if folder is not None and os.path.realpath(folder) != mounted:
        raise UsageError(f"lab {lab} mounts {mounted}, not {os.path.realpath(folder)}",
                         hint=f"`labctl lesson start {number} {folder}` brings the lab up "
                         "with that folder")
    if not os.path.isfile(os.path.join(mounted, SOURCE[lang])):
        raise UsageError(f"{mounted} has no {SOURCE[lang]}",
                         hint=f"`labctl lesson start {number} {mounted}` copies the starter")
    marker = _read_marker(Path(mounted))
    if marker.get("lesson") not in (None, number):
        raise UsageError(f"{mounted} holds lesson {marker['lesson']}, not lesson {number}",
                         hint=f"`labctl lesson check {marker['lesson']}`, or start lesson "
                         f"{number} in a folder of its own")
    with progress_reporter(f"lesson {number} check") as progress:
        progress(f"building and running your {'C' if lang == 'c' else 'Python'} program")
        checked = check(handle, item, lang)
    findings = judge.judge(item, checked.observation)
    ok = judge.passed(findings)
    if ladder is not None and checked.frames:
        from labctl.wire.ladder import draw

        draw(checked.frames, ladder)
    if as_json:
        verdict: LessonVerdict = {
            "lesson": number, "lang": lang, "passed": ok,
            "findings": [f.to_dict() for f in findings],
            "pcap": str(checked.pcap) if checked.pcap else None,
            "sent": checked.observation.sent}
        print_json(verdict)
    else:
        where = (f"{checked.server}" if item.roles == "single"
                 else f"server {checked.server}, client {checked.client}")
        console.print(f"lesson {number}: {item.title} ({lang}; {where})", highlight=False)
        for f in findings:
            mark = "[green]PASS[/]" if f.passed else "[red]FAIL[/]"
            console.print(f"{mark}  {escape(f.text)}", highlight=False, soft_wrap=True)
        if checked.frames:
            console.print(f"on the wire ({checked.pcap}):", highlight=False)
            for line in _ladder_lines(checked):
                console.print(line, markup=False, highlight=False)
        if ladder is not None and checked.frames:
            console.print(f"ladder written to {ladder}", highlight=False)
        good = sum(f.passed for f in findings)
        console.print(f"{good} of {len(findings)} findings pass"
                      + ("" if ok else f": `labctl lesson hint {number}` helps"),
                      highlight=False)
    if not ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(lesson_app, name="lesson")
