"""`labctl lesson grade N DIR`: a class's submissions judged in one lab, one after
the other, as `lesson check` judges a learner's (labctl/course/grade.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from labctl.cli.common import console, int_range, path_option, progress_reporter
from labctl.cli.lesson import LangOption, NumberArgument, _lang, lesson_app
from labctl.cli.safeprint import print_json
from labctl.errors import LabctlError, UsageError

if TYPE_CHECKING:
    from labctl.course.catalog import Lesson
    from labctl.course.grade import Graded
    from labctl.lab.handle import LabHandle

DEFAULT_GRADE_LAB = "grade"
RUN_SECONDS = 120  # as `lesson check`'s (labctl.course.check.RUN_SECONDS)
_VERDICT_STYLE = {"pass": "green", "fail": "red", "error": "yellow"}


def verdict_table(graded: list[Graded]) -> Table:
    """The terminal table: one row per student."""
    from labctl.course.grade import table_rows

    table = Table(box=None, pad_edge=False, show_edge=False)
    table.add_column("student", overflow="fold")
    table.add_column("verdict")
    table.add_column("first failing finding", overflow="fold")
    for g, (student, verdict, first) in zip(graded, table_rows(graded), strict=True):
        table.add_row(escape(student), f"[{_VERDICT_STYLE[g.verdict]}]{verdict}[/]",
                      escape(first))
    return table


def _grading_lab(item: Lesson, lab: str,
                 progress: Callable[[str], None]) -> tuple[LabHandle, bool]:
    """Lab `lab` with the grading folder at /mnt/lesson: reused when it is up with that
    folder, brought up when it is not made (True: grade made it). A lab that mounts
    another folder (a learner's) is refused: grading empties the folder it mounts."""
    from labctl.course.catalog import topology_file
    from labctl.course.check import NODE_DIR, mounted_folder
    from labctl.course.grade import (
        grading_folder,
        make_grading_folder,
        remove_grading_folder,
    )
    from labctl.lab import lifecycle
    from labctl.lab.handle import open_lab
    from labctl.lab.labs import lab_made

    if lab_made(lab):
        handle = open_lab(lab)
        mounted = mounted_folder(handle)
        if mounted != os.path.realpath(grading_folder(lab)):
            raise UsageError(f"lab {lab} mounts {mounted}, not a grading folder: grading "
                             "would empty it",
                             hint="leave --lab out, or name a lab that is not up: lesson "
                             "grade brings it up")
        return handle, False
    progress(f"bringing up lab {lab}")
    folder = make_grading_folder(lab)
    options = lifecycle.UpOptions(mounts=(f"{folder}:{NODE_DIR}",), name=lab,
                                  allow_host_mounts=(str(folder),))
    options.check()
    try:
        with resources.as_file(topology_file(item)) as topology:
            result = lifecycle.up(topology, options, progress)
    except BaseException:  # nothing half-made: up cleans up its lab, this its folder
        remove_grading_folder(lab)
        raise
    return open_lab(result.lab.name), True


def grade(number: int = NumberArgument,
          folder: Path = typer.Argument(..., metavar="DIR",
                                        help="A folder with one folder per student, each "
                                        "holding the student's lesson.c or lesson.py."),
          lang: str = LangOption,
          lab: str = typer.Option(DEFAULT_GRADE_LAB, "--lab", metavar="NAME",
                                  help="The grading lab: reused when it is up from an "
                                  "earlier grade --keep, else brought up (and taken down "
                                  "after, without --keep)."),
          keep: bool = typer.Option(False, "--keep", help="Leave the lab up for the next "
                                    "grading run."),
          timeout: int = typer.Option(RUN_SECONDS, "--timeout", metavar="SECONDS",
                                      callback=int_range("--timeout", 10, 600),
                                      help="Each student's program (each side) runs at "
                                      "most this long."),
          junit: Path = typer.Option(None, "--junit", metavar="FILE",
                                     callback=path_option("--junit", "write"),
                                     help="Also write the verdicts as JUnit XML (one test "
                                     "case per student)."),
          as_json: bool = typer.Option(False, "--json", help="Print the verdicts as "
                                       "JSON.")) -> None:
    """Judge every student's submission as `lesson check` would, one after the other in
    one lab. Exit 0 when every student passes, 1 when one fails (or the lab stopped), 2
    for bad input."""
    from labctl.course import grade as grading
    from labctl.course.catalog import lesson
    from labctl.lab import lifecycle
    from labctl.lab.labs import check_lab_name

    item = lesson(number)
    lang = _lang(lang)
    lab = check_lab_name(lab)  # before it names the grading folder
    entries = grading.submissions(Path(os.path.abspath(folder)))
    with progress_reporter(f"lesson {number} grade") as progress:
        handle, made = _grading_lab(item, lab, progress)
        try:
            graded, broken = grading.grade_all(
                handle, item, lang, Path(os.path.abspath(folder)), entries,
                grading.grading_folder(lab), timeout, progress)
        finally:
            if made and not keep:
                progress(f"taking lab {lab} down")
                lifecycle.destroy(lab)
                grading.remove_grading_folder(lab)
    if junit is not None:
        grading.write_junit(junit, grading.junit_xml(item, lang, graded))
    if as_json:
        print_json(grading.output(item, lang, lab, graded))
    else:
        console.print(f"lesson {number}: {item.title} ({lang}; lab {lab})", highlight=False)
        console.print(verdict_table(graded), soft_wrap=True)
        good = sum(g.verdict == "pass" for g in graded)
        console.print(f"{good} of {len(graded)} students pass", highlight=False)
        if junit is not None:
            console.print(f"JUnit XML written to {junit}", highlight=False)
    if broken:
        raise LabctlError(f"lab {lab} stopped being usable: {broken}",
                          hint=f"`labctl down {lab}`, then grade the students marked error "
                          "again")
    if any(g.verdict != "pass" for g in graded):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    lesson_app.command("grade")(grade)
