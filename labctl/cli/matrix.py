"""`labctl matrix --kernels A,B TOPOLOGY -- COMMAND...`: one scenario across kernels
(labctl/lab/matrix.py runs it; this prints the table or the JSON)."""

from __future__ import annotations

import dataclasses

import typer
from rich.table import Table

from labctl.cli.common import (
    MirrorOption,
    TopologyArgument,
    console,
    err_console,
    progress_reporter,
    seconds,
)
from labctl.cli.report import on_interrupt
from labctl.cli.safeprint import outside_text, print_json
from labctl.lab import lifecycle, matrix


def matrix_command(
    topology: str = TopologyArgument,
    command: list[str] = typer.Argument(
        None, metavar="COMMAND", help="A step: a command run on this host in each lab "
        "(after --), with LABCTL_LAB set to the lab's name."),
    kernels: str = typer.Option(
        ..., "--kernels", metavar="KERNEL,...", help="The kernels, one lab each, in "
        "turn: image, debian:VERSION or a kernel path (as `labctl up --kernel` takes them)."),
    steps: list[str] = typer.Option(
        None, "--step", metavar="'CMD'", help="A step before the one after --: "
        "one command line, split as a shell would (never run by one); repeatable."),
    name: str = typer.Option(
        None, "--name", metavar="NAME", help="The matrix's lab name (default: the "
        "topology's name with -matrix)."),
    step_timeout: float = typer.Option(
        matrix.STEP_SECONDS, "--step-timeout", metavar="SECONDS",
        help="Seconds each step may take; past them it fails.",
        callback=seconds("step-timeout")),
    timeout: float = typer.Option(300, help="Seconds for every node of a lab to be ready.",
                                  metavar="SECONDS", callback=seconds("timeout")),
    mirror: str = MirrorOption,
    as_json: bool = typer.Option(False, "--json", help="Print the matrix as JSON "
                                 "(docs/json.md)."),
) -> None:
    """Run the same steps in a lab on each kernel: up, the steps, down, one kernel at a
    time; a table of kernel x step. Exit 1 if any cell failed."""
    from labctl.topology.catalog import find_topology
    from labctl.topology.load import read_lab_name

    kernel_list = matrix.parse_kernels(kernels)
    argvs = matrix.parse_steps(steps or [], command or [])
    path = find_topology(topology)
    lab = matrix.lab_name(read_lab_name(path), name)
    options = lifecycle.UpOptions(timeout=timeout, mirror=mirror, name=lab)
    options.check()
    on_interrupt(lambda: f"the matrix's lab {lab} is taken down; `labctl down --lab {lab}` "
                 "removes what is left if it was interrupted half-way")
    with progress_reporter(f"matrix {path.stem}") as progress:
        report = matrix.run_matrix(path, kernel_list, argvs, options, progress,
                                   step_timeout)
    if as_json:
        print_json(dataclasses.asdict(report))
    else:
        header, rows = matrix.format_rows(report)
        table = Table(title=f"matrix {path.stem} (lab {lab})", title_justify="left")
        for title in header:
            table.add_column(outside_text(title))
        for row in rows:
            table.add_row(*(outside_text(cell) for cell in row))
        console.print(table)
    if not report.passed:
        err_console.print("the matrix has failed cells", markup=False)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("matrix")(matrix_command)
