"""`labctl run EXAMPLE`: run rdma-core's examples between two nodes of the lab."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from labctl.capture.runhook import capture_line, captured_runner
from labctl.cli import complete
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
from labctl.cli.shapes import ExampleRow
from labctl.errors import UsageError, short_repr
from labctl.lab.handle import LabHandle, open_lab
from labctl.runners.custom import custom_spec
from labctl.runners.examples import (
    ATOMIC_PERFTESTS,
    EXAMPLES,
    IMPLS,
    MCKEY_GROUP,
    PERFTESTS,
    TEACHES,
    pingpong_variant,
)
from labctl.runners.execute import RunResult, failure_details
from labctl.runners.matrix import run_matrix
from labctl.runners.pairs import resolve_pairs
from labctl.runners.schedule import MAX_JOBS, pair_group, run_pairs
from labctl.runners.spec import ExampleSpec, check_options

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

ALL_PERFTESTS = (*PERFTESTS, *ATOMIC_PERFTESTS)
TRANSPORTS = ("rc", "uc", "ud", "srq")  # --transport's choices (checked in pingpong)
ServerOption = typer.Option(None, "--server", help="Server node (default: the first node "
                            "with an RDMA device).",
                            metavar="NODE", autocompletion=complete.node_names)
ClientOption = typer.Option(None, "--client", help="Client node (default: the next node "
                            "with an RDMA device).",
                            metavar="NODE", autocompletion=complete.node_names)
JsonOption = typer.Option(False, "--json", help="Print the result record(s) as JSON.")
TimeoutOption = typer.Option(None, "--timeout",
                             metavar="SECONDS", help="Seconds before a run counts as failed.",
                             callback=seconds("timeout"))


def pick_nodes(handle: LabHandle, server: str | None, client: str | None) -> tuple[str, str]:
    """The server and client nodes: as given (checked), or the first two with RDMA."""
    rdma_nodes = [n.name for n in handle.lab.nodes if n.rdma != "none"]
    names = [n.name for n in handle.lab.nodes]
    for flag, value in (("--server", server), ("--client", client)):
        if value is None:
            continue
        if value not in names:
            raise UsageError(f"{flag}: lab {handle.lab.name} has no node {short_repr(value)}",
                             hint=f"nodes: {', '.join(names)}")
        if value not in rdma_nodes:
            raise UsageError(f"{flag}: node {value} has no RDMA device (rdma: none)",
                             hint="nodes with RDMA devices: "
                             + (", ".join(rdma_nodes) or "none"))
    server = server or (rdma_nodes[0] if rdma_nodes else None)
    client = client or next((n for n in rdma_nodes if n != server), None)
    if not server or not client:
        raise UsageError("this example needs two nodes with RDMA devices",
                         hint="add nodes with rdma: rxe, or pick them with --server/--client")
    if server == client:
        raise UsageError("--server and --client must be different nodes")
    return server, client


PairsOption = typer.Option("first", "--pairs", metavar="first|adjacent|all|A:B,C:D",
                           autocompletion=complete.choices("first", "adjacent", "all"),
                           help="Node pairs: first (the two nodes picked as without "
                           "--pairs), adjacent (every pair sharing a segment), all (every "
                           "pair; those without an IP path are skipped) or A:B,C:D "
                           "(server:client).")
JobsOption = typer.Option(1, "--jobs", "-j",
                          metavar="COUNT", callback=int_range("--jobs", 1, MAX_JOBS),
                          help="With --pairs: runs at once at most "
                          "(runs that share a node never overlap).")


def check_pair_flags(pairs: str, jobs: int, server: str | None, client: str | None) -> None:
    """--pairs and --jobs against --server/--client: before the lab is opened."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= MAX_JOBS:
        raise UsageError(f"--jobs must be a whole number from 1 to {MAX_JOBS} (got "
                         f"{short_repr(jobs)})", hint="e.g. --jobs 2")
    if pairs != "first" and (server or client):
        raise UsageError("--server/--client choose the first pair only",
                         hint="name the pairs in --pairs instead, e.g. --pairs node1:node2")


def choose_pairs(handle: LabHandle, pairs: str, server: str | None,
                 client: str | None) -> list[tuple[str, str]]:
    if pairs == "first":
        return [pick_nodes(handle, server, client)]
    chosen = resolve_pairs(handle.lab, pairs)
    if not chosen:
        raise UsageError(f"--pairs {pairs}: lab {handle.lab.name} has no such pair",
                         hint="adjacent needs two RDMA nodes on one segment; all, two "
                         "nodes with RDMA devices")
    return chosen


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
            "bytes": "{} bytes copied"}.get(key)
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
    return ", ".join(p for p in parts if p)


def _outcome(r: RunResult) -> str:
    color = {"passed": "green", "skipped": "yellow"}.get(r.status, "red")
    notes = [r.reason] if r.reason else []
    if r.retried:  # say it: a pass that needed a fresh pair is not a clean pass
        notes.append(f"attempt {r.attempts}; earlier ones hit a known race, see --json")
    # escape(): a reason can quote what a node said; "[/x]" there is no markup of ours
    return f"[{color}]{r.status}[/]" + (f" ({escape('; '.join(notes))})" if notes else "")


def print_results(results: list[RunResult], as_json: bool, *, summary: bool = False,
                  as_list: bool = False) -> None:
    if as_json:
        records = [r.to_dict() for r in results]
        one = len(records) == 1 and not summary and not as_list
        print(json.dumps(records[0] if one else records, indent=2))
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
    for r in results if not as_json else []:
        if r.capture:
            console.print(capture_line(r), markup=False, soft_wrap=True)
    for r in results:
        if r.status == "failed":
            err_console.print(f"[bold red]{r.example} {r.variant} failed[/]: "
                              f"{escape(r.reason)}")
            err_console.print(failure_details(r), markup=False, soft_wrap=True)
    if any(r.status == "failed" for r in results):
        raise typer.Exit(1)


def _run_one(name: str, variant: str, lab: str | None, server: str | None,
             client: str | None, options: dict[str, Any], as_json: bool,
             capture: bool = False, capture_dir: Path | None = None, *,
             pairs: str = "first", jobs: int = 1) -> None:
    options = check_options(options)  # bad values exit 2 before the lab is even opened
    check_pair_flags(pairs, jobs, server, client)
    _run_spec(open_lab(lab), EXAMPLES[(name, variant)], server, client, options, as_json,
              capture, capture_dir, pairs=pairs, jobs=jobs)


def _run_spec(handle: LabHandle, spec: ExampleSpec, server: str | None, client: str | None,
              options: dict[str, Any], as_json: bool, capture: bool,
              capture_dir: Path | None, *, pairs: str, jobs: int) -> None:
    """Run `spec` between the chosen pair, or each of several pairs (--pairs)."""
    chosen = choose_pairs(handle, pairs, server, client)
    if pairs != "first":
        _run_pairs(handle, spec, chosen, options, as_json, capture, capture_dir, jobs)
        return
    server, client = chosen[0]
    result = captured_runner(capture, capture_dir)(handle, spec, server, client, options)
    print_results([result], as_json)
    if result.status == "skipped":
        # Asked for by name, an unsupported run is refused: say why, exit as for bad input.
        err_console.print(f"[bold red]refused:[/] {result.label} between {server} and "
                          f"{client}: {result.reason}")
        raise typer.Exit(2)


def _run_pairs(handle: LabHandle, spec: ExampleSpec, chosen: list[tuple[str, str]],
               options: dict[str, Any], as_json: bool, capture: bool,
               capture_dir: Path | None, jobs: int) -> None:
    """One example between several pairs (--pairs): a record per pair, the server x client
    table, exit 1 if a run failed and 2 if none could run at all."""
    if options.get("group") is not None and jobs > 1 and len(chosen) > 1:
        raise UsageError("--group with --jobs above 1: runs in parallel need a multicast "
                         "group each", hint="leave --group out (pair N then uses 239.1.N.1) "
                         "or use --jobs 1")

    run = captured_runner(capture, capture_dir, pair_in_name=True)

    def one(index: int, server: str, client: str) -> RunResult:
        opts = dict(options)
        if spec.name == "mckey" and opts.get("group") is None:
            opts["group"] = pair_group(index)
        result = run(handle, spec, server, client, opts)
        if not as_json:
            _progress(result)
        return result

    results = run_pairs(chosen, jobs, one)
    if not as_json:
        _print_example_matrix(results, chosen)
    if all(r.status == "skipped" for r in results):
        print_results(results, as_json, as_list=True)
        err_console.print(f"[bold red]refused:[/] {spec.label}: no pair can run it: "
                          + "; ".join(dict.fromkeys(r.reason for r in results)))
        raise typer.Exit(2)
    print_results(results, as_json, as_list=True)  # exits 1 on a failure


ImplOption = typer.Option("c", "--impl", metavar=complete.choice_metavar(*IMPLS),
                          autocompletion=complete.choices(*IMPLS),
                          help="Server implementation (and the client's unless "
                          "--client-impl): c (ibv_rc_pingpong) or python "
                          "(labctl.nodeside.pingpong on pyverbs). RC only.")
ClientImplOption = typer.Option(None, "--client-impl", metavar=complete.choice_metavar(*IMPLS),
                                autocompletion=complete.choices(*IMPLS),
                                help="Client implementation: c or python (default: as "
                                "--impl).")


@run_app.command()
def pingpong(
    transport: str = typer.Option("rc", "--transport", "-t", help="rc, uc, ud or srq.",
                                  metavar=complete.choice_metavar(*TRANSPORTS),
                                  autocompletion=complete.choices(*TRANSPORTS)),
    impl: str = ImplOption,
    client_impl: str = ClientImplOption,
    server: str = ServerOption,
    client: str = ClientOption,
    size: int = typer.Option(None, "--size", "-s", metavar="BYTES", callback=run_value("size"),
                             help="Message size in bytes."),
    iters: int = typer.Option(None, "--iters", "-n", metavar="COUNT", callback=run_value("iters"),
                              help="Number of exchanges."),
    mtu: int = typer.Option(None, "--mtu", "-m", metavar="BYTES", callback=run_value("mtu"),
                            help="Path MTU (256..4096)."),
    rx_depth: int = typer.Option(None, "--rx-depth",
                                 metavar="COUNT", callback=run_value("rx_depth"),
                                 help="Receives posted at a time."),
    port: int = typer.Option(None, "--port", "-p", metavar="PORT", callback=run_value("port"),
                             help="TCP port of the exchange (18515)."),
    timeout: float = TimeoutOption,
    as_json: bool = JsonOption,
    capture: bool = CaptureOption,
    capture_dir: Path = CaptureDirOption,
    pairs: str = PairsOption,
    jobs: int = JobsOption,
    lab: str = LabOption,
) -> None:
    """ibv_{rc,uc,ud,srq}_pingpong between two nodes (GID index chosen automatically);
    with --impl python, labctl's Python RC pingpong, alone or against the C one."""
    client_impl = client_impl or impl
    for value in (impl, client_impl):
        if value not in IMPLS:
            raise UsageError(f"unknown implementation {value!r}", hint="use c or python")
    variant = transport
    if (impl, client_impl) != ("c", "c"):
        if transport != "rc":
            raise UsageError("the Python pingpong speaks RC only", hint="use --transport rc")
        variant = pingpong_variant(impl, client_impl)
    if ("pingpong", variant) not in EXAMPLES:
        raise UsageError(f"unknown transport {transport!r}", hint="use rc, uc, ud or srq")
    options = {"size": size, "iters": iters, "mtu": mtu, "rx_depth": rx_depth, "port": port,
               "timeout": timeout}
    _run_one("pingpong", variant, lab, server, client, options, as_json, capture,
             capture_dir, pairs=pairs, jobs=jobs)


@run_app.command()
def rping(
    server: str = ServerOption,
    client: str = ClientOption,
    count: int = typer.Option(10, "--count", "-c", metavar="COUNT", callback=run_value("count"),
                              help="Pings (rping -C)."),
    size: int = typer.Option(None, "--size", "-s", metavar="BYTES", callback=run_value("size"),
                             help="Ping data size (rping -S)."),
    port: int = typer.Option(None, "--port", "-p", metavar="PORT", callback=run_value("port"),
                             help="RDMA CM port (rping -p)."),
    verbose: bool = typer.Option(True, "--verbose/--quiet", "-v/-q",
                                 help="rping -v: print (and count) each ping."),
    timeout: float = TimeoutOption,
    as_json: bool = JsonOption,
    capture: bool = CaptureOption,
    capture_dir: Path = CaptureDirOption,
    pairs: str = PairsOption,
    jobs: int = JobsOption,
    lab: str = LabOption,
) -> None:
    """rping (RDMA CM, RC, RDMA READ/WRITE) between two nodes; rxe and siw."""
    options = {"count": count, "size": size, "port": port, "verbose": verbose,
               "timeout": timeout}
    _run_one("rping", "rc", lab, server, client, options, as_json, capture,
             capture_dir, pairs=pairs, jobs=jobs)


@run_app.command()
def perftest(
    test: str = typer.Argument(..., help=f"One of: {', '.join(ALL_PERFTESTS)}.",
                               metavar="TEST", autocompletion=complete.choices(*ALL_PERFTESTS)),
    server: str = ServerOption,
    client: str = ClientOption,
    iters: int = typer.Option(100, "--iters", "-n", metavar="COUNT", callback=run_value("iters"),
                              help="Iterations (perftest -n)."),
    size: int = typer.Option(None, "--size", "-s", metavar="BYTES", callback=run_value("size"),
                             help="Message size (perftest -s)."),
    rdma_cm: bool = typer.Option(False, "--rdma-cm", "-R",
                                 help="Connect through RDMA CM (always on siw)."),
    port: int = typer.Option(None, "--port", "-p", metavar="PORT", callback=run_value("port"),
                             help="Exchange port (perftest -p)."),
    timeout: float = TimeoutOption,
    as_json: bool = JsonOption,
    capture: bool = CaptureOption,
    capture_dir: Path = CaptureDirOption,
    pairs: str = PairsOption,
    jobs: int = JobsOption,
    lab: str = LabOption,
) -> None:
    """A perftest benchmark (-d and -x chosen automatically; -R on siw); the atomic tests
    on rxe only (siw has no atomics)."""
    if test not in ALL_PERFTESTS:
        raise UsageError(f"unknown perftest {test!r}",
                         hint=f"use one of {', '.join(ALL_PERFTESTS)}")
    options = {"iters": iters, "size": size, "rdma_cm": rdma_cm, "port": port,
               "timeout": timeout}
    _run_one("perftest", test, lab, server, client, options, as_json, capture,
             capture_dir, pairs=pairs, jobs=jobs)


@run_app.command()
def mckey(
    server: str = typer.Option(None, "--server", help="Receiver node (default: the first).",
                               metavar="NODE", autocompletion=complete.node_names),
    client: str = typer.Option(None, "--client", help="Sender node (default: the second).",
                               metavar="NODE", autocompletion=complete.node_names),
    count: int = typer.Option(4, "--count", "-c", metavar="COUNT", callback=run_value("count"),
                              help="Messages expected by the receiver."),
    group: str = typer.Option(None, "--group", metavar="IP", help=f"Multicast address (default "
                              f"{MCKEY_GROUP}; with --pairs, pair N uses 239.1.N.1)."),
    wait: int = typer.Option(20, "--wait", metavar="SECONDS", callback=run_value("wait"),
                             help="Seconds the receiver waits at most."),
    one_qp: bool = typer.Option(False, "--one-qp", help="Send all messages from one QP "
                                "(mckey -C N): on rxe only the first arrives."),
    timeout: float = TimeoutOption,
    as_json: bool = JsonOption,
    capture: bool = CaptureOption,
    capture_dir: Path = CaptureDirOption,
    pairs: str = PairsOption,
    jobs: int = JobsOption,
    lab: str = LabOption,
) -> None:
    """mckey (RDMA CM multicast over UD) with a bounded wait; reports delivered/expected."""
    options = {"count": count, "group": group, "wait": wait, "timeout": timeout}
    _run_one("mckey", "ud-1qp" if one_qp else "ud", lab, server, client, options, as_json, capture,
             capture_dir, pairs=pairs, jobs=jobs)


PortOption = typer.Option(None, "--port", "-p", metavar="PORT", callback=run_value("port"),
                          help="Port the server listens on.")


@run_app.command("rdma-server")
def rdma_server(
    server: str = ServerOption,
    client: str = ClientOption,
    port: int = PortOption,
    timeout: float = TimeoutOption,
    as_json: bool = JsonOption,
    capture: bool = CaptureOption,
    capture_dir: Path = CaptureDirOption,
    pairs: str = PairsOption,
    jobs: int = JobsOption,
    lab: str = LabOption,
) -> None:
    """librdmacm's rdma_server/rdma_client: connect, one send and receive; rxe and siw."""
    _run_one("rdma-server", "rc", lab, server, client, {"port": port, "timeout": timeout},
             as_json, capture, capture_dir, pairs=pairs, jobs=jobs)


CountOption = typer.Option(10, "--count", "-c", metavar="COUNT", callback=run_value("count"),
                           help="Messages each way (-C).")
SizeOption = typer.Option(None, "--size", "-s", metavar="BYTES", callback=run_value("size"),
                          help="Message size in bytes (-S).")


@run_app.command()
def udaddy(
    server: str = ServerOption,
    client: str = ClientOption,
    count: int = CountOption,
    size: int = SizeOption,
    timeout: float = TimeoutOption,
    as_json: bool = JsonOption,
    capture: bool = CaptureOption,
    capture_dir: Path = CaptureDirOption,
    pairs: str = PairsOption,
    jobs: int = JobsOption,
    lab: str = LabOption,
) -> None:
    """udaddy: UD datagrams through RDMA CM (address resolution, no connection); rxe only."""
    _run_one("udaddy", "ud", lab, server, client,
             {"count": count, "size": size, "timeout": timeout}, as_json, capture, capture_dir,
             pairs=pairs, jobs=jobs)


@run_app.command()
def ucmatose(
    server: str = ServerOption,
    client: str = ClientOption,
    connections: int = typer.Option(4, "--connections",
                                    metavar="COUNT", callback=run_value("connections"),
                                    help="Connections (-c)."),
    count: int = CountOption,
    size: int = SizeOption,
    port: int = PortOption,
    timeout: float = TimeoutOption,
    as_json: bool = JsonOption,
    capture: bool = CaptureOption,
    capture_dir: Path = CaptureDirOption,
    pairs: str = PairsOption,
    jobs: int = JobsOption,
    lab: str = LabOption,
) -> None:
    """ucmatose: several RC connections through RDMA CM, sends both ways; rxe and siw."""
    _run_one("ucmatose", "rc", lab, server, client,
             {"connections": connections, "count": count, "size": size, "port": port,
              "timeout": timeout}, as_json, capture, capture_dir, pairs=pairs, jobs=jobs)


@run_app.command()
def cmtime(
    server: str = ServerOption,
    client: str = ClientOption,
    connections: int = typer.Option(10, "--connections",
                                    metavar="COUNT", callback=run_value("connections"),
                                    help="Connections (-c)."),
    port: int = PortOption,
    timeout: float = TimeoutOption,
    as_json: bool = JsonOption,
    capture: bool = CaptureOption,
    capture_dir: Path = CaptureDirOption,
    pairs: str = PairsOption,
    jobs: int = JobsOption,
    lab: str = LabOption,
) -> None:
    """cmtime: the time each step of RDMA CM connection setup takes; rxe only."""
    _run_one("cmtime", "rc", lab, server, client,
             {"connections": connections, "port": port, "timeout": timeout}, as_json,
             capture, capture_dir, pairs=pairs, jobs=jobs)


def _stream_command(name: str, doc: str) -> None:
    """`labctl run rstream` and `labctl run riostream`: the same options, another program."""

    def command(
        server: str = ServerOption,
        client: str = ClientOption,
        count: int = typer.Option(100, "--count", "-c",
                                  metavar="COUNT", callback=run_value("count"),
                                  help="Transfers (-C)."),
        size: int = typer.Option(4096, "--size", "-s", metavar="BYTES", callback=run_value("size"),
                                 help="Transfer size in bytes (-S)."),
        port: int = PortOption,
        timeout: float = TimeoutOption,
        as_json: bool = JsonOption,
        capture: bool = CaptureOption,
        capture_dir: Path = CaptureDirOption,
        pairs: str = PairsOption,
        jobs: int = JobsOption,
        lab: str = LabOption,
    ) -> None:
        _run_one(name, "rsocket", lab, server, client,
                 {"count": count, "size": size, "port": port, "timeout": timeout}, as_json,
                 capture, capture_dir, pairs=pairs, jobs=jobs)

    command.__doc__ = doc
    run_app.command(name)(command)


_stream_command("rstream", "rstream: socket calls over rsockets (RDMA underneath); rxe only.")
_stream_command("riostream",
                "riostream: rsockets with riomap/riowrite (RDMA writes); rxe and siw.")


@run_app.command()
def rcopy(
    server: str = ServerOption,
    client: str = ClientOption,
    size: int = typer.Option(65536, "--size", "-s", metavar="BYTES", callback=run_value("size"),
                             help="Bytes of the file copied."),
    port: int = PortOption,
    timeout: float = TimeoutOption,
    as_json: bool = JsonOption,
    capture: bool = CaptureOption,
    capture_dir: Path = CaptureDirOption,
    pairs: str = PairsOption,
    jobs: int = JobsOption,
    lab: str = LabOption,
) -> None:
    """rcopy: a file made in the client node copied over rsockets, compared on arrival."""
    _run_one("rcopy", "rsocket", lab, server, client,
             {"size": size, "port": port, "timeout": timeout}, as_json, capture, capture_dir,
             pairs=pairs, jobs=jobs)


@run_app.command()
def custom(
    server_cmd: str = typer.Option(..., "--server-cmd", help="Server command: shell text run "
                                   "with `sh -c` in the server node; placeholders "
                                   "{server_ip} {client_ip} {device} {gid_index} {port} are "
                                   "filled in, quoted.", metavar="'CMD'"),
    client_cmd: str = typer.Option(..., "--client-cmd", help="Client command, as "
                                   "--server-cmd, run in the client node once the server is "
                                   "ready.", metavar="'CMD'"),
    server: str = ServerOption,
    client: str = ClientOption,
    ready: str = typer.Option(None, "--ready", help="Shell probe run in the server node "
                              "until it exits 0 (the server is ready); placeholders as "
                              "--server-cmd.", metavar="'PROBE'"),
    ready_port: int = typer.Option(None, "--ready-port", help="The server is ready once "
                                   "something listens on this TCP port.", metavar="PORT",
                                   callback=int_range("--ready-port", 1, 65535)),
    port: int = typer.Option(None, "--port", "-p", metavar="PORT", callback=run_value("port"),
                             help="The value of {port} (18515)."),
    timeout: float = TimeoutOption,
    as_json: bool = JsonOption,
    capture: bool = CaptureOption,
    capture_dir: Path = CaptureDirOption,
    pairs: str = PairsOption,
    jobs: int = JobsOption,
    lab: str = LabOption,
) -> None:
    """Your own server and client commands between two nodes, run like the built-in
    examples (readiness, timeout, output, exit 1 on failure, --json record). Without
    --ready/--ready-port the client starts 1 s after the server. The server must end by
    itself once the client is done."""
    options = check_options({"port": port, "timeout": timeout})
    spec = custom_spec(server_cmd, client_cmd, ready=ready, ready_port=ready_port)
    check_pair_flags(pairs, jobs, server, client)
    handle = open_lab(lab)  # --server/--client are checked as in every run (pick_nodes)
    _run_spec(handle, spec, server, client, options, as_json, capture, capture_dir,
              pairs=pairs, jobs=jobs)


def example_list() -> list[ExampleRow]:
    """Every example: its command, variants, what it teaches, the devices it runs on."""
    rows: dict[str, ExampleRow] = {}
    for (name, variant), spec in EXAMPLES.items():
        row = rows.setdefault(name, {"example": name, "variants": [], "devices": {},
                                     "teaches": TEACHES.get(name, "")})
        row["variants"].append(variant)
        for device in ("rxe", "siw"):
            row["devices"].setdefault(device, [])
            if spec.supports(device):
                row["devices"][device].append(variant)
    return list(rows.values())


def _devices_text(row: ExampleRow) -> str:
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
        print(json.dumps(rows, indent=2))
        return
    table = Table(title="examples (labctl run NAME)")
    for column in ("example", "variants", "teaches", "devices"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["example"], ", ".join(row["variants"]), row["teaches"],
                      _devices_text(row))
    console.print(table)


@run_app.command("all")
def run_all(
    server: str = ServerOption,
    client: str = ClientOption,
    iters: int = typer.Option(100, "--iters", "-n", metavar="COUNT", callback=run_value("iters"),
                              help="Iterations of each pingpong and "
                              "perftest (small: TCG is slow)."),
    timeout: float = TimeoutOption,
    as_json: bool = JsonOption,
    capture: bool = CaptureOption,
    capture_dir: Path = CaptureDirOption,
    pairs: str = PairsOption,
    jobs: int = JobsOption,
    lab: str = LabOption,
) -> None:
    """Every example the two nodes' devices support, one summary; exit 1 on a failure."""
    options = check_options({"iters": iters, "timeout": timeout})
    check_pair_flags(pairs, jobs, server, client)
    handle = open_lab(lab)
    chosen = choose_pairs(handle, pairs, server, client)
    runner = captured_runner(capture, capture_dir)

    def pair(index: int, pair_server: str, pair_client: str) -> list[RunResult]:
        return run_matrix(handle, pair_server, pair_client,
                          {**options, "group": pair_group(index)},
                          progress=None if as_json else _progress,
                          run=runner)

    results = [r for rs in run_pairs(chosen, jobs, pair) for r in rs]
    if len(chosen) > 1 and not as_json:
        _print_pair_matrix(results, chosen)
    print_results(results, as_json, summary=True)  # exits 1 on a failure


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
