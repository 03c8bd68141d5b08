"""`labctl devices|devinfo|asyncwatch`: run the node-side inspector (labctl.verbs) in nodes.

With one node the node's stdout, stderr and exit code pass through untouched, so
`labctl devinfo node1 -v` is byte-for-byte what `ibv_devinfo -v` prints in node1 (up to
8 MiB a stream: a node is untrusted). With several nodes each node's output gets a header
and the exit code is the largest one. With --json each node's reply must be the JSON its
command prints; a node whose reply is not is named on stderr and labctl exits 1.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import typer

from labctl import bounded
from labctl.bounded import printable
from labctl.cli import complete
from labctl.cli.common import LabOption, err_console
from labctl.cli.safeprint import print_json

if TYPE_CHECKING:
    from labctl.lab.handle import LabHandle

NODE_MODULE = "labctl.verbs"


# `python3 -m labctl.verbs`, minus runpy's imports (labctl/verbs/__main__.py's cli()).
NODE_ENTRY = f"from {NODE_MODULE}.__main__ import cli; cli()"


# The node commands for these (labctl/nodeside/node-commands.sh): in nodes booted from
# labctl's node image a compiled client of the node's helper (labctl/images/verbs-client.c),
# 0.3-0.5 s faster under TCG than starting python3; on a foreign Vagrant box the Python
# wrapper, the same call as below.
NODE_COMMANDS = ("devinfo", "devices")


def node_argv(*args: str) -> list[str]:
    """labctl.verbs ARGS in a node. devinfo and devices run as the node commands
    labctl-devinfo and labctl-devices; the others start python3 lean: -S skips site (~0.3 s
    under TCG; the node's helper answers without it, the direct path loads site itself) and
    -c skips runpy (0.1-0.25 s)."""
    from labctl.lab.handle import LabHandle

    if args and args[0] in NODE_COMMANDS:
        return [f"labctl-{args[0]}", *args[1:]]
    return LabHandle.node_python3("-S", "-c", NODE_ENTRY, *args)


NODES_ARG = typer.Argument(None, help="Nodes to inspect (default: every node of the lab).",
                           metavar="NODE", autocompletion=complete.node_names)


def _open(lab: str | None) -> LabHandle:
    from labctl.lab.handle import open_lab

    return open_lab(lab)  # errors reach the user through app.main's one error printer


def _nodes(handle: LabHandle, names: list[str] | None) -> list[str]:
    known = handle.node_names()
    if not names:
        return known
    from labctl.topology.lookup import require_node

    for name in names:
        require_node(handle.lab, name)
    return list(dict.fromkeys(names))


NODE_COMMAND_SECONDS = 120.0  # a node's devinfo/devices: past this it is cut (exit 124)


def _run_all(
    handle: LabHandle, nodes: list[str], args: list[str]
) -> dict[str, subprocess.CompletedProcess[str]]:
    def one(node: str) -> subprocess.CompletedProcess[str]:
        return handle.run(node, node_argv(*args), timeout=NODE_COMMAND_SECONDS)

    with ThreadPoolExecutor(max_workers=max(1, min(len(nodes), 8))) as pool:
        results = list(pool.map(one, nodes))
    return dict(zip(nodes, results, strict=True))


def _report(results: dict[str, subprocess.CompletedProcess[str]], as_json: bool,
            kinds: tuple[type, ...] = (dict,)) -> int:
    """Print the nodes' outputs; return the exit code for labctl. JSON has one shape however
    many nodes: an object keyed by node name (a node that failed: {"error": text})."""
    if len(results) == 1 and not as_json:
        (proc,) = results.values()
        # printable(): a node's text never carries a terminal escape sequence to the
        # terminal (ibv_devinfo's own output has none: it stays byte for byte)
        sys.stdout.write(printable(proc.stdout or ""))
        sys.stdout.flush()
        if proc.stderr:
            sys.stderr.write(printable(proc.stderr))
        return proc.returncode
    if as_json:
        merged, unreadable = _merge_json(results, kinds)
        print_json(merged)
        for node, why in unreadable.items():
            err_console.print(f"{node} sent an unreadable reply ({why})", markup=False)
        if unreadable:
            return max(1, *(p.returncode for p in results.values()))
    else:
        first = True
        for node, proc in results.items():
            if not first:
                sys.stdout.write("\n")
            first = False
            sys.stdout.write(f"=== {node} (exit {proc.returncode}) ===\n")
            sys.stdout.write(printable(proc.stdout or ""))
            sys.stdout.flush()
            if proc.stderr:
                sys.stderr.write(f"[{node}] " + printable(proc.stderr).replace(
                    "\n", f"\n[{node}] ").rstrip())
                sys.stderr.write("\n")
    return max((p.returncode for p in results.values()), key=lambda rc: (rc != 0, rc))


# What each node command prints with --json (labctl/verbs): devinfo one Snapshot object,
# devices a list of {"device", "node_guid"} (an {"error", "errno"} object when it cannot list).
JSON_REPLY_KINDS: dict[str, tuple[type, ...]] = {"devinfo": (dict,), "devices": (list, dict)}


def _merge_json(results: dict[str, subprocess.CompletedProcess[str]],
                kinds: tuple[type, ...]) -> tuple[dict[str, object], dict[str, str]]:
    """Each node's JSON record (read bounded, of one of `kinds`), or {"error": text} for a
    node that failed or answered with something else; and why each answer that came with
    exit 0 was unreadable (the node's own command succeeded: the reply is at fault)."""
    merged: dict[str, object] = {}
    unreadable: dict[str, str] = {}
    for node, proc in results.items():
        try:
            merged[node] = _json_reply(proc.stdout, kinds)
        except bounded.BoundedError as exc:
            if proc.returncode == 0:
                unreadable[node] = str(exc)
                merged[node] = {"error": f"unreadable reply: {exc}"}
            else:  # the node's own error message (no such device, timed out...)
                merged[node] = {"error": (proc.stderr or proc.stdout or "").strip()[-2000:]}
            continue
        if proc.stderr:
            sys.stderr.write(f"[{node}] {printable(proc.stderr.rstrip())}\n")
    return merged, unreadable


def _json_reply(text: str, kinds: tuple[type, ...]) -> object:
    if not text.strip():
        raise bounded.BoundedError("an empty reply")
    value = bounded.loads(text, limit=bounded.NODE_REPLY_BYTES)
    if not isinstance(value, kinds):
        names = " or ".join("an object" if k is dict else "a list" for k in kinds)
        raise bounded.BoundedError(f"{bounded.json_kind(value)}, not {names}")
    return value


def register(app: typer.Typer) -> None:
    @app.command("devices")
    def devices(
        nodes: list[str] | None = NODES_ARG,
        as_json: bool = typer.Option(False, "--json", help="JSON output."),
        lab: str | None = LabOption,
    ) -> None:
        """List the RDMA devices of nodes, like ibv_devices."""
        handle = _open(lab)
        args = ["devices"] + (["--json"] if as_json else [])
        raise typer.Exit(_report(_run_all(handle, _nodes(handle, nodes), args), as_json,
                                 JSON_REPLY_KINDS["devices"]))

    @app.command("devinfo")
    def devinfo(
        nodes: list[str] | None = NODES_ARG,
        ib_dev: str | None = typer.Option(None, "-d", "--ib-dev", metavar="DEVICE",
                                          help="Device (default all)."),
        ib_port: str | None = typer.Option(
            None, "-i", "--ib-port", metavar="PORT", help="Port number (default all ports)."
        ),
        list_only: bool = typer.Option(False, "-l", "--list", help="Only the device names."),
        verbose: bool = typer.Option(False, "-v", "--verbose", help="All attributes."),
        as_json: bool = typer.Option(False, "--json", help="The attribute records as JSON."),
        lab: str | None = LabOption,
    ) -> None:
        """Show device and port attributes of nodes, like ibv_devinfo."""
        handle = _open(lab)
        args = ["devinfo"]
        if ib_dev is not None:
            args.append(f"--ib-dev={ib_dev}")
        if ib_port is not None:
            args.append(f"--ib-port={ib_port}")
        if verbose:
            args.append("-v")
        if as_json:
            args.append("--json")
        if list_only:  # last: devinfo acts on -l as soon as it sees it
            args.append("-l")
        raise typer.Exit(_report(_run_all(handle, _nodes(handle, nodes), args), as_json,
                                 JSON_REPLY_KINDS["devinfo"]))

    @app.command("asyncwatch")
    def asyncwatch(
        node: str = typer.Argument(..., help="Node to watch.", metavar="NODE",
                                   autocompletion=complete.node_names),
        ib_dev: str | None = typer.Option(None, "-d", "--ib-dev", metavar="DEVICE",
                                          help="Device (default first)."),
        as_json: bool = typer.Option(False, "--json", help="One JSON object per event."),
        lab: str | None = LabOption,
    ) -> None:
        """Print a node's async events (port up/down, GID changes) until Ctrl-C."""
        handle = _open(lab)
        _nodes(handle, [node])
        args = ["asyncwatch", "--exit-on-eof"]
        if ib_dev is not None:
            args.append(f"--ib-dev={ib_dev}")
        if as_json:
            args.append("--json")
        proc = handle.popen(
            node, handle.node_python(NODE_MODULE, *args), stdin=subprocess.PIPE, text=True
        )
        try:
            rc = proc.wait()
        except KeyboardInterrupt:
            rc = _stop(proc)
        raise typer.Exit(rc)


def _stop(proc: subprocess.Popen[str]) -> int:
    """Ctrl-C: closing the watcher's stdin ends it in the node (--exit-on-eof)."""
    try:
        if proc.stdin:
            proc.stdin.close()
        return proc.wait(timeout=5)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
        return 0
    except OSError:
        return 0
