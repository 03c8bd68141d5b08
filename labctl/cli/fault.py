"""`labctl fault add|list|clear|opcodes`: drop, delay, duplicate, reorder or corrupt chosen
RDMA packets a node sends on a data link (labctl/rdmafault); `labctl counters NODE`: its
RDMA device's counters (and TCP's, for siw)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.table import Table
from rich.text import Text

from labctl.cli import complete
from labctl.cli.common import HELP_SETTINGS, LabOption, NodeArgument, console, int_range
from labctl.cli.report import on_interrupt
from labctl.cli.safeprint import print_json
from labctl.cli.shapes import FaultClearOutput
from labctl.lab.handle import open_lab
from labctl.rdmafault.fault_spec import COUNT_MAX
from labctl.topology.lookup import require_endpoint, require_node

if TYPE_CHECKING:  # the fault code loads only when a fault command runs
    from labctl.rdmafault.apply import FaultList

fault_app = typer.Typer(help="Drop, delay, duplicate, reorder or corrupt chosen RDMA "
                        "packets (docs/faults.md).", no_args_is_help=True,
                        context_settings=HELP_SETTINGS)


@fault_app.command("add")
def add(
    endpoint: str = typer.Argument(..., metavar="NODE:IF", autocompletion=complete.endpoints,
                                   help="The link end whose sent packets the fault picks, "
                                   "e.g. node2:eth1 (that node's egress)."),
    action: str = typer.Argument(..., metavar="drop|delay|duplicate|reorder|corrupt",
                                 help="drop, delay, duplicate, reorder or corrupt.",
                                 autocompletion=complete.choices(
                                     "drop", "delay", "duplicate", "reorder", "corrupt")),
    opcode: list[str] = typer.Option([], "--opcode", metavar="OPCODE",
                                     help="RoCE v2 opcode class (send, write, read-request, "
                                     "read-response, ack, atomic, atomic-ack), name "
                                     "(RC_SEND_ONLY) or number; repeatable. Default: all."),
    qp: str = typer.Option(None, "--qp", metavar="QPN", help="Destination QP number only."),
    psn: str = typer.Option(None, "--psn", metavar="PSN",
                            help="This PSN, or LOW-HIGH: a range of PSNs (24-bit)."),
    tcp: bool = typer.Option(False, "--tcp", help="siw: TCP segments instead of RoCE v2."),
    port: int = typer.Option(None, "--port", metavar="PORT",
                             callback=int_range("--port", 1, 65535),
                             help="siw: the TCP flow to or from this port (implies --tcp)."),
    nth: int = typer.Option(None, "--nth", metavar="COUNT",
                            callback=int_range("--nth", 1, COUNT_MAX),
                            help="Only the COUNT-th matching packet."),
    every: int = typer.Option(None, "--every", metavar="COUNT",
                              callback=int_range("--every", 1, COUNT_MAX),
                              help="Every COUNT-th matching packet."),
    count: int = typer.Option(None, "--count", metavar="COUNT",
                              callback=int_range("--count", 1, COUNT_MAX),
                              help="At most COUNT packets (\"drop the first 3 ACKs\": "
                              "--opcode ack --count 3)."),
    skip: int = typer.Option(None, "--skip", metavar="COUNT",
                             callback=int_range("--skip", 1, COUNT_MAX),
                             help="Let the first COUNT matching packets through first."),
    probability: str = typer.Option(None, "--probability", metavar="PERCENT",
                                    help="Each matching packet with this chance: 30% or 0.3."),
    delay: str = typer.Option(None, "--delay", metavar="TIME",
                              help="delay/reorder: hold packets this long (default 10ms)."),
    as_json: bool = typer.Option(False, "--json", help="Print the fault as JSON."),
    lab: str = LabOption,
) -> None:
    """Put a fault on the packets NODE sends on IF, in the node's own kernel (tc)."""
    from labctl.rdmafault.apply import add_fault
    from labctl.rdmafault.fault_spec import build_spec

    spec = build_spec(action, opcodes=opcode, qp=qp, psn=psn, tcp=tcp, tcp_port=port,
                      nth=nth, every=every, count=count, skip=skip, probability=probability,
                      delay=delay)
    handle = open_lab(lab)
    node, ifname = require_endpoint(handle.lab, endpoint)
    on_interrupt(fault_add_interrupted(handle.lab.name, f"{node}:{ifname}"))
    fault = add_fault(handle, node, ifname, spec)
    if as_json:
        print_json(fault.to_json())
    else:
        console.print(Text(f"fault {fault.id} on {node}:{ifname}: {spec.describe()}"))


def fault_add_interrupted(lab: str, endpoint: str) -> str:
    """What an interrupted `fault add` may have left: a fault half-put on that link end,
    recorded only once it is whole (so `fault list` may not show it)."""
    return (f"a fault on {endpoint} may be half-added: `labctl fault clear {endpoint} "
            f"--lab {lab}` takes off that link end's faults (`labctl fault list --lab {lab}` "
            f"shows them); one not listed there goes with `labctl down --lab {lab}`")


def _table(record: FaultList) -> Table:
    table = Table(title=f"faults of lab {record['lab']}")
    for column in ("id", "link end", "fault", "matched", "hit"):
        table.add_column(column)
    for fault in record["faults"]:
        gone = fault["matched"] is None
        table.add_row(str(fault["id"]), f"{fault['node']}:{fault['interface']}",
                      Text(fault["description"]),
                      "?" if gone else str(fault["matched"]), "?" if gone else str(fault["hit"]))
    return table


@fault_app.command("list")
def list_faults(
    as_json: bool = typer.Option(False, "--json", help="Print JSON (docs/json.md)."),
    lab: str = LabOption,
) -> None:
    """The lab's faults and how many packets each matched and hit so far ("?": its node
    did not answer, or restarted and lost it)."""
    from labctl.rdmafault.apply import list_record

    record = list_record(lab)
    if as_json:
        print_json(record)
    elif not record["faults"]:
        console.print(f"lab {record['lab']} has no faults")
    else:
        console.print(_table(record))


@fault_app.command("clear")
def clear(
    endpoint: str = typer.Argument(None, metavar="NODE:IF", autocompletion=complete.endpoints,
                                   help="Only the faults on this link end."),
    fault_id: int = typer.Option(None, "--id", metavar="ID", help="Only this fault.",
                                 callback=int_range("--id", 1, COUNT_MAX)),
    lab: str = LabOption,
    as_json: bool = typer.Option(False, "--json", help="Print JSON (docs/json.md)."),
) -> None:
    """Take faults off (all of the lab's by default; `down` removes them too)."""
    from labctl.rdmafault.apply import clear_faults

    handle = open_lab(lab)
    chosen = None if endpoint is None else require_endpoint(handle.lab, endpoint)
    removed = clear_faults(handle, chosen, fault_id)
    if as_json:
        record: FaultClearOutput = {"lab": handle.lab.name, "removed": [f.id for f in removed]}
        print_json(record)
        return
    console.print(f"lab {handle.lab.name}: " + (
        f"removed fault(s) {', '.join(str(f.id) for f in removed)}" if removed
        else "no faults to remove"))


@fault_app.command("opcodes")
def opcodes() -> None:
    """The RoCE v2 opcodes and classes --opcode takes."""
    from labctl.rdmafault.fault_spec import _CLASSES, class_opcodes, opcode_table

    table_ = opcode_table()
    table = Table(title="--opcode values")
    table.add_column("class")
    table.add_column("opcodes")
    for word in _CLASSES:
        table.add_row(word, ", ".join(f"{table_[op]} (0x{op:02x})"
                                      for op in class_opcodes(word, table_)))
    console.print(table)


def counters(
    node: str = NodeArgument,
    every_counter: bool = typer.Option(False, "--all",
                                       help="Also the counters that are zero."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (docs/json.md)."),
    lab: str = LabOption,
) -> None:
    """A node's RDMA device counters (rdma statistic) and TCP counters (siw)."""
    from labctl.lab.counters import CountersRecord, changed, read_counters

    handle = open_lab(lab)
    require_node(handle.lab, node)
    found = read_counters(handle, node)
    if as_json:
        record = CountersRecord(lab=handle.lab.name, node=node, counters=found)
        print_json(record)
        return
    shown = found if every_counter else changed(found)
    table = Table(title=f"counters of {node} (lab {handle.lab.name})"
                  + ("" if every_counter else "; not zero (--all: every one)"))
    for column in ("device/port", "counter", "value"):
        table.add_column(column)
    for group, values in shown.items():
        for key, value in values.items():
            table.add_row(Text(group), Text(key), str(value))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(fault_app, name="fault")
    app.command()(counters)
