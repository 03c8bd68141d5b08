"""`labctl link set NODE:IF ...`: pull a data link's cable, or make it lossy and slow;
`labctl link show`: each link's ends, up or down, and their netem."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, cast

import typer
from rich.table import Table
from rich.text import Text

from labctl.cli import complete
from labctl.cli.common import HELP_SETTINGS, LabOption, console
from labctl.cli.report import on_interrupt
from labctl.cli.safeprint import print_json
from labctl.cli.shapes import LinkSetOutput
from labctl.errors import LabctlError, UsageError, short_repr
from labctl.lab.handle import open_lab
from labctl.topology.lookup import require_endpoint

if TYPE_CHECKING:
    from labctl.lab.links import LinkShowOutput

link_app = typer.Typer(help="Change the state of a node's data link.", no_args_is_help=True,
                       context_settings=HELP_SETTINGS)

# fullmatch only: with match(), `$` also accepts a trailing newline
_PERCENT = re.compile(r"(\d{1,3}(?:\.\d{1,6})?)%?")
_DURATION = re.compile(r"(\d{1,9}(?:\.\d{1,6})?)(us|ms|s)?")
_MAX_DELAY_US = 60_000_000  # a minute: more is a typo, and tc's own limit is near


_RATE = re.compile(r"(\d{1,9}(?:\.\d{1,6})?)(bit|kbit|mbit|gbit)?")
_RATE_BITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}
_MAX_RATE_BITS = 100 * 10**9  # 100 Gbit/s: more is a typo


def _duration(flag: str, value: str) -> str:
    """A netem time as tc writes it (10ms, 500us, 1s; a bare number is ms), at most 60 s."""
    match = _DURATION.fullmatch(value)
    scale = {"us": 1, "ms": 1000, "s": 1_000_000}
    if not match or float(match.group(1)) * scale[match.group(2) or "ms"] > _MAX_DELAY_US:
        raise UsageError(f"bad {flag} {short_repr(value)}",
                         hint="e.g. 10ms, 500us, 1s (at most 60 s)")
    return f"{match.group(1)}{match.group(2) or 'ms'}"


def _percent(flag: str, value: str) -> str:
    match = _PERCENT.fullmatch(value)
    if not match or float(match.group(1)) > 100:
        raise UsageError(f"bad {flag} {short_repr(value)}", hint="a percentage, e.g. 5%")
    return f"{match.group(1)}%"


def _rate(value: str) -> str:
    """A netem rate as tc writes it (100mbit, 1gbit, 500kbit; a bare number is mbit)."""
    match = _RATE.fullmatch(value.lower())
    unit = match.group(2) or "mbit" if match else ""
    if (not match or float(match.group(1)) == 0
            or float(match.group(1)) * _RATE_BITS[unit] > _MAX_RATE_BITS):
        raise UsageError(f"bad --rate {short_repr(value)}",
                         hint="bits per second, e.g. 100mbit, 1gbit, 500kbit (at most 100gbit)")
    return f"{match.group(1)}{unit}"


def netem_args(loss: str | None, delay: str | None, *, jitter: str | None = None,
               rate: str | None = None, duplicate: str | None = None,
               corrupt: str | None = None) -> list[str]:
    """tc netem arguments for the node (the lab host's kernel may have no netem), in tc's
    own words: delay TIME [JITTER], loss P%, duplicate P%, corrupt P%, rate RATE."""
    args: list[str] = []
    if jitter and not delay:
        raise UsageError("--jitter varies the delay: it needs --delay",
                         hint="e.g. --delay 10ms --jitter 2ms")
    if delay:
        args += ["delay", _duration("--delay", delay)]
        if jitter:
            args.append(_duration("--jitter", jitter))
    if loss:
        args += ["loss", _percent("--loss", loss)]
    if duplicate:
        args += ["duplicate", _percent("--duplicate", duplicate)]
    if corrupt:
        args += ["corrupt", _percent("--corrupt", corrupt)]
    if rate:
        args += ["rate", _rate(rate)]
    return args


@link_app.command("set")
def set_link(
    endpoint: str = typer.Argument(..., help="NODE:IF, e.g. node1:eth1.", metavar="NODE:IF",
                                   autocompletion=complete.endpoints),
    state: str = typer.Argument(None, help="up or down (carrier on/off).", metavar="up|down",
                                autocompletion=complete.choices("up", "down")),
    loss: str = typer.Option(None, "--loss",
                             metavar="PERCENT", help="Drop this share of frames sent, e.g. 5%."),
    delay: str = typer.Option(None, "--delay",
                              metavar="TIME", help="Delay frames sent by this much, e.g. 10ms."),
    jitter: str = typer.Option(None, "--jitter", metavar="TIME",
                               help="With --delay: vary it by up to this much, e.g. 2ms."),
    rate: str = typer.Option(None, "--rate", metavar="RATE",
                             help="Send at most this fast, e.g. 100mbit, 1gbit."),
    duplicate: str = typer.Option(None, "--duplicate", metavar="PERCENT",
                                  help="Send this share of frames twice, e.g. 1%."),
    corrupt: str = typer.Option(None, "--corrupt", metavar="PERCENT",
                                help="Flip a bit in this share of frames, e.g. 0.1%."),
    clear: bool = typer.Option(False, "--clear", help="Remove the link's netem (loss, "
                               "delay...)."),
    as_json: bool = typer.Option(False, "--json", help="Print what was done as JSON "
                                 "(docs/json.md)."),
    lab: str = LabOption,
) -> None:
    """Take a data link down or up, or impair what the node sends on it (netem)."""
    if state not in (None, "up", "down"):
        raise UsageError(f"link state must be up or down (got {short_repr(state)})",
                         hint="e.g. `labctl link set node1:eth1 down`")
    impair = netem_args(loss, delay, jitter=jitter, rate=rate, duplicate=duplicate,
                        corrupt=corrupt)  # bad values: exit 2 before the lab is opened
    if state is None and not (impair or clear):
        raise UsageError("nothing to do", hint="give up|down, --loss, --delay, --jitter, "
                         "--rate, --duplicate, --corrupt or --clear")
    handle = open_lab(lab)
    node, ifname = require_endpoint(handle.lab, endpoint)
    on_interrupt(link_set_interrupted(handle.lab.name, f"{node}:{ifname}", state,
                                      bool(impair or clear)))
    done: LinkSetOutput = {"lab": handle.lab.name, "node": node, "interface": ifname,
                           "state": cast(Literal["up", "down"] | None, state), "netem": None}

    def say(text: str) -> None:  # with --json, stdout is the one JSON document
        if not as_json:
            console.print(text)

    if state is not None:
        handle.provider.set_link_state(node, ifname, state == "up")
        say(f"{node}:{ifname} {state}")
    if clear or impair:
        # with settings, --clear is implied: `replace` leaves only them
        tc = (["tc", "qdisc", "del", "dev", ifname, "root"] if clear and not impair
              else ["tc", "qdisc", "replace", "dev", ifname, "root", "netem", *impair])
        result = handle.run(node, tc, timeout=60)
        nothing_to_clear = ("No such file" in result.stderr  # no qdisc of ours on the link
                            or "handle of zero" in result.stderr)
        if result.returncode != 0 and not (clear and nothing_to_clear):
            raise LabctlError(f"tc in {node} failed: {result.stderr.strip()}")
        done["netem"] = [] if tc[2] == "del" else tc[7:]
        say(f"{node}:{ifname} " + ("cleared" if tc[2] == "del" else " ".join(tc[6:])))
    if as_json:
        print_json(done)


def link_set_interrupted(lab: str, endpoint: str, state: str | None, netem: bool) -> str:
    """What an interrupted `link set` may have left: only that link end, half-set."""
    undo = []
    if state is not None:
        undo.append(f"`labctl link set {endpoint} {'down' if state == 'up' else 'up'} "
                    f"--lab {lab}` sets its carrier back")
    if netem:
        undo.append(f"`labctl link set {endpoint} --clear --lab {lab}` removes its netem")
    return (f"{endpoint} may be half-set (`labctl link show --lab {lab}` shows it): "
            + " and ".join(undo) + "; the rest of the lab is untouched")


def _netem_words(netem: Mapping[str, Any] | None) -> str:
    """"delay 10ms loss 5%" as `link set` writes it ("-" for no netem)."""
    if netem is None:
        return "-"
    parts = [f"{word} {netem[key]:g}{unit}" for word, key, unit in (
        ("delay", "delay_ms", "ms"), ("jitter", "jitter_ms", "ms"),
        ("loss", "loss_percent", "%"), ("rate", "rate_mbit", "mbit"))
        if netem.get(key)]
    return " ".join(parts) or "netem (no delay, loss or rate)"


def _links_table(record: LinkShowOutput) -> Table:
    table = Table(title=f"links of lab {record['lab']} ({record['provider']})")
    for column in ("link", "end", "node side", "host side", "netem (node's egress)"):
        table.add_column(column)
    for link in record["links"]:
        for end in link["ends"]:
            node_side = end["node_state"] + (f" ({end['reason']})" if end["reason"] else "")
            host = ("not read (engine host)" if end["host_state"] is None
                    else end["host_state"])
            # Text, not markup: a reason is what a node said.
            table.add_row(Text(f"{link['segment']} {link['subnet']}"),
                          Text(f"{end['node']}:{end['interface']}"),
                          Text(node_side, style="green" if end["node_state"] == "up" else "red"),
                          Text(f"{end['host_interface']} {host}"),
                          Text(_netem_words(end["netem"])))
    return table


@link_app.command("show")
def show_links(
    lab: str = LabOption,
    as_json: bool = typer.Option(False, "--json",
                                 help="Print JSON: the lab's links and their ends (docs/json.md)."),
) -> None:
    """List the lab's data links: each end up or down, on the node's side and the host's,
    and its netem (qemu and single-host docker labs)."""
    from labctl.lab.links import collect_links

    record = collect_links(open_lab(lab))
    if as_json:
        print_json(record)
    else:
        console.print(_links_table(record))
    if any(e["node_state"] == "?" for link in record["links"] for e in link["ends"]):
        raise typer.Exit(1)  # a node could not be asked: its side is unknown


def register(app: typer.Typer) -> None:
    app.add_typer(link_app, name="link")
