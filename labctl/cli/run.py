"""`labctl run EXAMPLE`: run rdma-core's examples between two nodes of the lab."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table

from labctl.cli.common import LabOption, console, err_console
from labctl.errors import UsageError
from labctl.lab.handle import LabHandle, open_lab
from labctl.runners.examples import EXAMPLES
from labctl.runners.execute import RunResult, command_line, run_example

run_app = typer.Typer(help="Run rdma-core example programs across the lab's nodes.",
                      no_args_is_help=True)

ServerOption = typer.Option(None, "--server", help="Server node (default: the first node).")
ClientOption = typer.Option(None, "--client", help="Client node (default: the second node).")
JsonOption = typer.Option(False, "--json", help="Print the result record(s) as JSON.")
TimeoutOption = typer.Option(None, "--timeout", help="Seconds before a run counts as failed.")


def pick_nodes(handle: LabHandle, server: str | None, client: str | None) -> tuple[str, str]:
    rdma_nodes = [n.name for n in handle.lab.nodes if n.rdma != "none"]
    server = server or (rdma_nodes[0] if rdma_nodes else None)
    client = client or next((n for n in rdma_nodes if n != server), None)
    if not server or not client:
        raise UsageError("this example needs two nodes with RDMA devices",
                         hint="add nodes with rdma: rxe, or pick them with --server/--client")
    if server == client:
        raise UsageError("--server and --client must be different nodes")
    return server, client


def figures_text(result: RunResult) -> str:
    f = result.figures
    if not f:
        return ""
    parts = []
    if "bytes" in f:
        parts.append(f"{f['bytes']} B in {f['seconds']} s")
    if "mbit_per_sec" in f:
        parts.append(f"{f['mbit_per_sec']} Mbit/s")
    if "usec_per_iter" in f:
        parts.append(f"{f['usec_per_iter']} usec/iter")
    parts += [f"{k} {v}" for k, v in f.items()
              if k not in ("bytes", "seconds", "mbit_per_sec", "usec_per_iter", "iters")]
    return ", ".join(parts)


def print_results(results: list[RunResult], as_json: bool) -> None:
    if as_json:
        records = [r.to_dict() for r in results]
        print(json.dumps(records[0] if len(records) == 1 else records, indent=2))
    else:
        table = Table(title="results")
        for column in ("example", "server", "client", "result", "figures"):
            table.add_column(column)
        for r in results:
            color = {"passed": "green", "skipped": "yellow"}.get(r.status, "red")
            outcome = f"[{color}]{r.status}[/]" + (f" ({r.reason})" if r.reason else "")
            table.add_row(r.label if hasattr(r, "label") else f"{r.example} {r.variant}",
                          r.server, r.client, outcome, figures_text(r))
        console.print(table)
    for r in results:
        if r.status == "failed":
            err_console.print(f"[bold red]{r.example} {r.variant} failed[/]: {r.reason}")
            err_console.print(f"--- server {r.server}: {command_line(r.server_argv)}\n"
                              f"{r.server_output.rstrip()}\n--- client {r.client}: "
                              f"{command_line(r.client_argv)}\n{r.client_output.rstrip()}",
                              markup=False)
    if any(r.status == "failed" for r in results):
        raise typer.Exit(1)


def _run_one(name: str, variant: str, lab: str | None, server: str | None,
             client: str | None, options: dict[str, Any], as_json: bool) -> None:
    handle = open_lab(lab)
    server, client = pick_nodes(handle, server, client)
    spec = EXAMPLES[(name, variant)]
    print_results([run_example(handle, spec, server, client, options)], as_json)


@run_app.command()
def pingpong(
    transport: str = typer.Option("rc", "--transport", "-t", help="rc, uc, ud or srq."),
    server: str = ServerOption,
    client: str = ClientOption,
    size: int = typer.Option(None, "--size", "-s", help="Message size in bytes."),
    iters: int = typer.Option(None, "--iters", "-n", help="Number of exchanges."),
    mtu: int = typer.Option(None, "--mtu", "-m", help="Path MTU (256..4096)."),
    timeout: float = TimeoutOption,
    as_json: bool = JsonOption,
    lab: str = LabOption,
) -> None:
    """ibv_{rc,uc,ud,srq}_pingpong between two nodes (GID index chosen automatically)."""
    if ("pingpong", transport) not in EXAMPLES:
        raise UsageError(f"unknown transport {transport!r}", hint="use rc, uc, ud or srq")
    options = {"size": size, "iters": iters, "mtu": mtu, "timeout": timeout}
    _run_one("pingpong", transport, lab, server, client, options, as_json)


def register(app: typer.Typer) -> None:
    app.add_typer(run_app, name="run")
