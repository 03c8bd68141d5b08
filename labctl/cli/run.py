"""`labctl run EXAMPLE`: run rdma-core's examples between two nodes of the lab."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.markup import escape
from rich.table import Table

from labctl.capture.runhook import capture_line, captured_runner, capturing_run
from labctl.cli import complete, run_rdma_core_tests
from labctl.cli.capture import CaptureDirOption, CaptureOption
from labctl.cli.common import (
    HELP_SETTINGS,
    LabOption,
    console,
    err_console,
    int_range,
    run_value,
    seconds,
)
from labctl.cli.report import on_interrupt, print_error
from labctl.cli.safeprint import print_json
from labctl.cli.shapes import ExampleRow, RunListOutput
from labctl.errors import UsageError
from labctl.lab.handle import LabHandle
from labctl.runners.custom import custom_spec
from labctl.runners.example_spec import ExampleSpec, check_options
from labctl.runners.examples import EXAMPLES, TEACHES
from labctl.runners.execute import RunResult, failure_details, outputs_text
from labctl.runners.matrix import run_matrix
from labctl.runners.options import (
    ALL_COMMAND,
    CLIENT,
    CUSTOM_COMMAND,
    JOBS,
    PAIRS,
    RUN_COMMANDS,
    SERVER,
    STORAGE_COMMANDS,
    TIMEOUT,
    RunCommand,
    RunOption,
)
from labctl.runners.request import PairChoice, RunRequest
from labctl.runners.schedule import pair_group, run_pairs
from labctl.runners.storage import TEACHES as STORAGE_TEACHES
from labctl.runners.storage import WORKLOADS, run_storage, transports

run_app = typer.Typer(help="Run rdma-core example programs across the lab's nodes.",
                      invoke_without_command=True, context_settings=HELP_SETTINGS)


@run_app.callback()
def run_group(
    ctx: typer.Context,
    list_examples: bool = typer.Option(False, "--list", help="List every example (as `run "
                                       "list`) and exit."),
) -> None:
    """Run rdma-core example programs across the lab's nodes (`run --list`: the examples)."""
    if list_examples:
        run_list(as_json=False)
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:  # as the other command groups: help, exit 2
        print(ctx.get_help())
        raise typer.Exit(2)


def typer_parameter(option: RunOption) -> Any:
    """The typer Option (or Argument) of a run option as the table declares it; whole
    numbers are checked as they are parsed (exit 2 before the lab is opened)."""
    metavar = option.metavar or (complete.choice_metavar(*option.choices)
                                 if option.choices else None)
    completion = (complete.node_names if option.completes_nodes
                  else complete.choices(*option.choices) if option.choices else None)
    if not option.flags:
        return typer.Argument(option.default, help=option.help, metavar=metavar,
                              autocompletion=completion)
    callback: Any = None
    if option.value_type is float:
        callback = seconds(option.name)
    elif option.value_type is int and option.is_run_option:
        callback = run_value(option.name)
    elif option.bounds is not None:
        callback = int_range(option.flags[0], *option.bounds)
    return typer.Option(option.default, *option.flags, help=option.help, metavar=metavar,
                        autocompletion=completion, callback=callback)


ServerOption = typer_parameter(SERVER)
ClientOption = typer_parameter(CLIENT)
JsonOption = typer.Option(False, "--json", help="Print the result record(s) as JSON.")
TimeoutOption = typer_parameter(TIMEOUT)
# No short flag: -v is --verbose (devinfo, run rping), one meaning per short flag.
ShowOutputOption = typer.Option(False, "--show-output", help="After the table, print "
                                "what the programs printed (server and client, labelled), "
                                "as for a failed run; --json records hold it anyway.")
# What every run command takes after its own options, in --help's order.
_TAIL: tuple[tuple[str, type, Any], ...] = (
    ("timeout", float, TimeoutOption), ("as_json", bool, JsonOption),
    ("show_output", bool, ShowOutputOption),
    ("capture", bool, CaptureOption), ("capture_dir", Path, CaptureDirOption),
    ("pairs", str, typer_parameter(PAIRS)), ("jobs", int, typer_parameter(JOBS)),
    ("lab", str, LabOption),
)
Action = Callable[[RunCommand, dict[str, Any]], None]


def add_command(app: typer.Typer, command: RunCommand, action: Action, *,
                pair: bool = True, capture: bool = True, output: bool = True) -> None:
    """`labctl run NAME` (in `app`) made from its table entry: its options, then
    --server/--client and what every run command takes; `action` gets the command and the
    values by name. Without `pair` (a command across N nodes), no --server, --client,
    --pairs or --jobs; without `capture`, no --capture or --capture-dir; without `output`
    (no program output to show), no --show-output."""
    own = [o for o in command.options if o.leading]
    own += [command.server, command.client] if pair else []
    own += [o for o in command.options if not o.leading]
    tail = [t for t in _TAIL if (pair or t[0] not in ("pairs", "jobs"))
            and (capture or t[0] not in ("capture", "capture_dir"))
            and (output or t[0] != "show_output")]
    if command.flags_of(JOBS) != JOBS.flags:  # -j is the C tool's (ibv_rc_pingpong's DM)
        tail = [(n, t, typer_parameter(JOBS.but(flags=command.flags_of(JOBS))))
                if n == "jobs" else (n, t, d) for n, t, d in tail]
    params = [(o.name, o.value_type, typer_parameter(o.but(flags=command.flags_of(o))))
              for o in own] + tail

    def run_command(**values: Any) -> None:
        on_interrupt(run_interrupted(values.get("timeout")))
        action(command, values)

    run_command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default,
                           annotation=annotation) for name, annotation, default in params],
        return_annotation=None)
    run_command.__doc__ = command.doc
    app.command(command.name)(run_command)


REFUSED_HINT = ("`labctl run list` shows the devices each example runs on; choose other "
                "nodes with --server/--client or --pairs")


def refuse(what: str) -> NoReturn:
    """A run asked for by name that the chosen nodes cannot run: bad input (exit 2), said
    as every usage error is, after the records (--json) or the table."""
    print_error(UsageError(f"refused: {what}", hint=REFUSED_HINT))
    raise typer.Exit(2)


def run_interrupted(timeout: float | None) -> str:
    """What an interrupted run leaves: its local processes are gone, a program it started
    in a node ends by its own bound; the lab itself is as it was."""
    bound = f" (at most {timeout:g} s)" if timeout else ""
    return ("the lab is untouched, do not `labctl down` it: labctl stopped its own "
            "processes, and a program the run started in a node ends within the run's "
            f"timeout{bound}")


def key_figure_text(result: RunResult) -> str:
    """The one figure a summary row shows, with its unit."""
    f = {**result.server_figures, **result.figures}
    key = result.key_figure
    value = result.key_value()
    if key == "delivered" or "expected" in f:
        delivered = f.get("delivered", "?")
        return f"{delivered}/{f.get('expected', '?')} delivered"
    if value is None:
        return ""
    if key == "usec_per_iter":
        return f"{value} usec/iter"
    if key == "pings":
        return f"{value} pings"
    if key == "t_typical_usec":
        return f"{value} usec typical"
    if key == "bw_average":
        return f"{value} {f.get('bw_unit', 'MB/sec')} avg"
    text = {"end": "end {}", "return_status": "return status {}",
            "cm_connect_us_per_conn": "{} us/conn to connect", "usec_per_xfer": "{} usec/xfer",
            "bytes": "{} bytes copied", "rdma_latency_us": "RDMA {} us"}.get(key)
    if text:
        return text.format(value)
    return f"{key} {value}"


def figures_text(result: RunResult) -> str:
    f = result.figures
    if not f and not result.server_figures:
        return ""
    parts = [key_figure_text(result)] if result.key_value() is not None else []
    if "expected" in result.server_figures and not parts:
        parts.append(key_figure_text(result))
    if "bytes" in f and "seconds" in f:
        parts.append(f"{f['bytes']} B in {f['seconds']} s")
    if "mbit_per_sec" in f:
        parts.append(f"{f['mbit_per_sec']} Mbit/s")
    if "t_avg_usec" in f:
        parts.append(f"avg {f['t_avg_usec']} usec, min {f.get('t_min_usec')} usec")
    if "msg_rate_mpps" in f:
        parts.append(f"{f['bytes']} B msgs, {f['msg_rate_mpps'] * 1e6:.0f} msg/s")
    if "cm_error" in f:
        parts.append(f"cm error {f['cm_error']}")
    if "tcp_latency_us" in f:
        parts.append(f"TCP {f['tcp_latency_us']} us")
    for prefix in ("rdma", "tcp"):
        if f"{prefix}_bw_mb_per_s" in f:
            parts.append(f"{prefix.upper()} {f[f'{prefix}_bw_mb_per_s']} MB/s")
    return ", ".join(p for p in parts if p)


def _outcome(r: RunResult) -> str:
    color = {"passed": "green", "skipped": "yellow"}.get(r.status, "red")
    notes = [r.reason] if r.reason else []
    if r.retried:  # say it: a pass that needed a fresh pair is not a clean pass
        notes.append(f"attempt {r.attempts}; earlier ones hit a known race, see --json")
    # escape(): a reason can quote what a node said; "[/x]" there is no markup of ours
    return f"[{color}]{r.status}[/]" + (f" ({escape('; '.join(notes))})" if notes else "")


def print_records(results: list[RunResult]) -> None:
    """A run's --json: its records under one key, `{"records": [...]}`, for one pair as for
    many (docs/json.md: the top level is always an object)."""
    print_json({"records": [r.to_dict() for r in results]})


def print_outputs(results: list[RunResult]) -> None:
    """`--show-output`: each run's programs' output, labelled, on stdout after the tables.
    A failed run's is printed on stderr with its details (_fail_on_failures), once."""
    for r in results:
        if r.status == "skipped" or r.status == "failed":
            continue
        console.print(f"=== {r.label} {r.server} -> {r.client}: {r.status}", markup=False,
                      soft_wrap=True)
        console.print(outputs_text(r), markup=False, soft_wrap=True)


def print_results(results: list[RunResult], as_json: bool, *, summary: bool = False,
                  show_output: bool = False) -> None:
    if as_json:
        print_records(results)
    elif summary:
        table = Table(title="summary")
        for column in ("example", "transport/test", "server", "client", "result",
                       "key figure"):
            table.add_column(column)
        for r in results:
            table.add_row(r.example, r.variant, r.server, r.client, _outcome(r),
                          escape(key_figure_text(r)) if r.status != "skipped" else "")
        console.print(table)
        counts = {s: sum(r.status == s for r in results) for s in ("passed", "failed",
                                                                     "skipped")}
        console.print(", ".join(f"{n} {s}" for s, n in counts.items()))
    else:
        table = Table(title="results")
        for column in ("example", "server", "client", "result", "figures"):
            table.add_column(column)
        for r in results:
            table.add_row(r.label, r.server, r.client, _outcome(r), escape(figures_text(r)))
        console.print(table)
        for r in results:
            _print_test_rows(r)
    for r in results if not as_json else []:
        if r.capture:
            console.print(capture_line(r), markup=False, soft_wrap=True)
    if show_output and not as_json:
        print_outputs(results)
    _fail_on_failures(results, lambda r: f"{r.example} {r.variant}")


def _fail_on_failures(results: list[RunResult], label: Callable[[RunResult], str]) -> None:
    """Each failed run's reason and details on stderr, then exit 1 if any failed."""
    failed = [r for r in results if r.status == "failed"]
    for r in failed:
        err_console.print(f"[bold red]{label(r)} failed[/]: {escape(r.reason)}")
        err_console.print(failure_details(r), markup=False, soft_wrap=True)
    if failed:
        raise typer.Exit(1)


def _figure(value: Any) -> str:
    return "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _print_test_rows(result: RunResult) -> None:
    """A workload that runs several tests (qperf, fabric): one row each, RDMA beside TCP."""
    rows = result.figures.get("rows")
    if not isinstance(rows, list) or not rows:
        return
    table = Table(title=f"{result.example}: {result.server} (server) - {result.client}")
    for column in ("test", "transport", "latency (us)", "bandwidth (MB/s)", "result"):
        table.add_column(column)
    for row in rows:
        if not isinstance(row, dict):
            continue
        status = str(row.get("status", "?"))
        color = {"passed": "green", "unsupported": "yellow"}.get(status, "red")
        note = f" ({row['reason']})" if row.get("reason") else ""
        table.add_row(escape(str(row.get("test", "?"))), escape(str(row.get("transport", ""))),
                      _figure(row.get("latency_us")), _figure(row.get("bw_mb_per_s")),
                      f"[{color}]{escape(status)}[/]{escape(note)}")
    console.print(table)


def _run_example(command: RunCommand, values: dict[str, Any]) -> None:
    """An example's command: its catalogue entry, between the chosen pair(s)."""
    assert command.variant is not None  # every entry of RUN_COMMANDS has one
    spec = EXAMPLES[(command.name, command.variant(values))]
    _run_spec(spec, run_request(command, values))  # bad values: exit 2 before the lab


def _run_custom(command: RunCommand, values: dict[str, Any]) -> None:
    """Your own server and client commands, run as an example is."""
    request = run_request(command, values)
    spec = custom_spec(values["server_cmd"], values["client_cmd"], ready=values["ready"],
                       ready_port=values["ready_port"])
    _run_spec(spec, request)


def run_request(command: RunCommand, values: dict[str, Any]) -> RunRequest:
    """What a run command's values ask for, typed and checked once: bad values are refused
    (exit 2) before the lab is opened. Its own choices (an example's variant, a workload's
    transports) stay with the command."""
    return RunRequest(
        options=check_options(command.run_options(values)),
        choice=PairChoice(values["pairs"], values["server"], values["client"], values["jobs"]),
        lab=values["lab"], as_json=values["as_json"],
        show_output=values.get("show_output", False), capture=values.get("capture", False),
        capture_dir=values.get("capture_dir"))


def _run_spec(spec: ExampleSpec, request: RunRequest) -> None:
    """Run `spec` between the chosen pair, or each of several pairs (--pairs)."""
    handle, chosen = request.open()
    if request.choice.pairs != "first":
        _run_pairs(handle, spec, chosen, request)
        return
    server, client = chosen[0]
    result = captured_runner(request.capture, request.capture_dir)(handle, spec, server,
                                                                   client, request.options)
    print_results([result], request.as_json, show_output=request.show_output)
    if result.status == "skipped":
        # Asked for by name, an unsupported run is refused: say why, exit as for bad input.
        refuse(f"{result.label} between {server} and {client}: {result.reason}")


def _run_pairs(handle: LabHandle, spec: ExampleSpec, chosen: list[tuple[str, str]],
               request: RunRequest) -> None:
    """One example between several pairs (--pairs): a record per pair, the server x client
    table, exit 1 if a run failed and 2 if none could run at all."""
    options, as_json, jobs = request.options, request.as_json, request.choice.jobs
    if options.get("group") is not None and jobs > 1 and len(chosen) > 1:
        raise UsageError("--group with --jobs above 1: runs in parallel need a multicast "
                         "group each", hint="leave --group out (pair N then uses 239.1.N.1) "
                         "or use --jobs 1")

    run = captured_runner(request.capture, request.capture_dir, pair_in_name=True)

    def one(index: int, server: str, client: str) -> RunResult:
        opts = options
        if spec.name == "mckey" and opts.get("group") is None:
            opts = options.but(group=pair_group(index))
        result = run(handle, spec, server, client, opts)
        if not as_json:
            _progress(result)
        return result

    results = run_pairs(chosen, jobs, one)
    if not as_json:
        _print_example_matrix(results, chosen)
    if all(r.status == "skipped" for r in results):
        print_results(results, as_json)
        refuse(f"{spec.label}: no pair can run it: "
               + "; ".join(dict.fromkeys(r.reason for r in results)))
    print_results(results, as_json, show_output=request.show_output)  # exits 1 on a failure


for _command in RUN_COMMANDS:
    add_command(run_app, _command, _run_example)
add_command(run_app, CUSTOM_COMMAND, _run_custom)


def _run_storage(command: RunCommand, values: dict[str, Any]) -> None:
    """`run nvmeof`, `run nfs`: each transport (rdma, then tcp) between each pair, one table;
    exit 1 on a failure, 2 when nothing could run (the reasons said)."""
    chosen_transports = transports(values["transport"])
    request = run_request(command, values)
    handle, chosen = request.open()
    as_json, capture, capture_dir = request.as_json, request.capture, request.capture_dir
    multi = len(chosen) > 1

    def pair(index: int, server: str, client: str) -> list[RunResult]:
        results = []
        for transport in chosen_transports:
            workload = WORKLOADS[(command.name, transport)]
            label = f"{command.name} {transport}" + (f" {server}-{client}" if multi else "")
            with capturing_run(handle, server, label, capture, capture_dir, client) as cap:
                result = run_storage(handle, workload, server, client, request.options)
            result.capture = cap.record() if cap else None
            if not as_json:
                _progress(result)
            results.append(result)
        return results

    results = [r for rs in run_pairs(chosen, request.choice.jobs, pair) for r in rs]
    if as_json:
        print_records(results)
    else:
        _print_storage_table(command.name, results)
        for r in results:
            if r.capture:
                console.print(capture_line(r), markup=False, soft_wrap=True)
        if request.show_output:
            print_outputs(results)
    _fail_on_failures(results, lambda r: f"{r.label} {r.server} -> {r.client}")
    if all(r.status == "skipped" for r in results):
        refuse(f"{command.name}: " + "; ".join(dict.fromkeys(r.reason for r in results)))


def _print_storage_table(name: str, results: list[RunResult]) -> None:
    """One row per transport and pair: MB/s each way and whether the bytes came back."""
    table = Table(title=f"{name}: RDMA vs TCP (MB/s: 10^6 bytes/s, O_DIRECT, TCG)")
    for column in ("transport", "server", "client", "result", "MiB", "write MB/s",
                   "read MB/s", "verified"):
        table.add_column(column)
    for r in results:
        f = r.figures
        mib = f.get("write_bytes", 0) / 1048576 if "write_bytes" in f else None
        verified = {True: "yes", False: "no"}.get(f["verified"], "") if "verified" in f else ""
        table.add_row(r.variant, r.server, r.client, _outcome(r),
                      "" if mib is None else f"{mib:g}",
                      _number(f.get("write_mb_s")), _number(f.get("read_mb_s")), verified)
    console.print(table)


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) else ""


for _command in STORAGE_COMMANDS:
    add_command(run_app, _command, _run_storage)


def example_list() -> list[ExampleRow]:
    """Every `labctl run` subcommand, in the order they are registered (so that none can be
    missing): a catalogue example's variants, what it teaches and the devices it runs on; a
    command that is not one example (all, custom, ucx, ...) has the first sentence of its
    help, no variants and `devices` None."""
    rows: dict[str, ExampleRow] = {}
    for (name, variant), spec in EXAMPLES.items():
        row = rows.setdefault(name, {"example": name, "variants": [], "devices": {},
                                     "teaches": TEACHES.get(name, "")})
        row["variants"].append(variant)
        for device in ("rxe", "siw"):
            devices = row["devices"]
            assert devices is not None
            devices.setdefault(device, [])
            if spec.supports(device):
                devices[device].append(variant)
    for (name, variant), workload in WORKLOADS.items():  # `run nvmeof`, `run nfs`
        row = rows.setdefault(name, {"example": name, "variants": [], "devices": {},
                                     "teaches": STORAGE_TEACHES.get(name, "")})
        row["variants"].append(variant)
        for device in ("rxe", "siw"):
            devices = row["devices"]
            assert devices is not None
            devices.setdefault(device, [])
            if workload.spec.supports(device):
                devices[device].append(variant)
    listed: list[ExampleRow] = []
    for name, doc in run_commands():
        listed.append(rows.get(name) or {"example": name, "variants": [], "devices": None,
                                         "teaches": _first_sentence(doc)})
    return listed


def run_commands() -> list[tuple[str, str]]:
    """The subcommands registered on `labctl run` (but `list` itself), with their help."""
    found = []
    for info in run_app.registered_commands:
        name = info.name or (info.callback.__name__ if info.callback else "")
        if name and name != "list":
            found.append((name, inspect.getdoc(info.callback) or "" if info.callback else ""))
    return found


def _first_sentence(doc: str) -> str:
    """A help text's first sentence, on one line, without its full stop."""
    text = " ".join(doc.split())
    end = text.find(". ")
    return (text[:end] if end >= 0 else text).rstrip(".")


def _devices_text(row: ExampleRow) -> str:
    if row["devices"] is None:
        return f"see `labctl run {row['example']} -h`"
    parts = []
    for device, variants in row["devices"].items():
        if not variants:
            continue
        every = len(variants) == len(row["variants"])
        parts.append(device if every else f"{device} ({', '.join(variants)})")
    return ", ".join(parts)


@run_app.command("list")
def run_list(as_json: bool = JsonOption) -> None:
    """Every example: what it teaches and which devices (rxe, siw) it runs on."""
    rows = example_list()
    if as_json:
        listing: RunListOutput = {"examples": rows}
        print_json(listing)
        return
    table = Table(title="examples (labctl run NAME)")
    for column in ("example", "variants", "teaches", "devices"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["example"], ", ".join(row["variants"]), row["teaches"],
                      _devices_text(row))
    console.print(table)


def _run_all(command: RunCommand, values: dict[str, Any]) -> None:
    """Every example the two nodes' devices support, one summary; exit 1 on a failure."""
    request = run_request(command, values)
    handle, chosen = request.open()
    jobs, as_json = request.choice.jobs, request.as_json
    runner = captured_runner(request.capture, request.capture_dir)

    def pair(index: int, pair_server: str, pair_client: str) -> list[RunResult]:
        return run_matrix(handle, pair_server, pair_client,
                          request.options.but(group=pair_group(index)),
                          progress=None if as_json else _progress,
                          run=runner)

    results = [r for rs in run_pairs(chosen, jobs, pair) for r in rs]
    if len(chosen) > 1 and not as_json:
        _print_pair_matrix(results, chosen)
    print_results(results, as_json, summary=True,
                  show_output=request.show_output)  # exits 1 on a failure


add_command(run_app, ALL_COMMAND, _run_all)
run_rdma_core_tests.register(run_app)  # one node's test suite, not a pair's example


def _print_pair_matrix(results: list[RunResult], pairs: list[tuple[str, str]]) -> None:
    """Server x client, one cell per pair: passed/run (skipped ones not counted)."""
    servers = list(dict.fromkeys(s for s, _ in pairs))
    clients = list(dict.fromkeys(c for _, c in pairs))
    table = Table(title="pairs: passed/run (server x client)")
    table.add_column("server \\ client")
    for client in clients:
        table.add_column(client)
    for server in servers:
        cells = []
        for client in clients:
            mine = [r for r in results if (r.server, r.client) == (server, client)]
            ran = [r for r in mine if r.status != "skipped"]
            passed = sum(r.status == "passed" for r in ran)
            cells.append("" if not mine else f"{passed}/{len(ran)}" if ran else "skipped")
        table.add_row(server, *cells)
    console.print(table)


def _print_example_matrix(results: list[RunResult], pairs: list[tuple[str, str]]) -> None:
    """Server x client, one cell per pair: the run's result and key figure."""
    servers = list(dict.fromkeys(s for s, _ in pairs))
    clients = list(dict.fromkeys(c for _, c in pairs))
    label = results[0].label if results else ""
    table = Table(title=f"{label}: server x client")
    table.add_column("server \\ client")
    for client in clients:
        table.add_column(client)
    by_pair = {(r.server, r.client): r for r in results}
    for server in servers:
        cells = []
        for client in clients:
            r = by_pair.get((server, client))
            figure = key_figure_text(r) if r and r.status == "passed" else ""
            cells.append("" if r is None else f"{r.status} {figure}".strip())
        table.add_row(server, *cells)
    console.print(table)


def _progress(result: RunResult) -> None:
    err_console.print(f"{result.label} {result.server} -> {result.client}: {result.status}"
                      + (f" ({escape(result.reason)})" if result.reason else "")
                      + (f" in {result.seconds} s" if result.seconds else ""))


def register(app: typer.Typer) -> None:
    app.add_typer(run_app, name="run")
