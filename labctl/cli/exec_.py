"""`labctl exec NODE -- CMD...`: run a command in a node, with its exit code;
`labctl exec --all -- CMD...`: in every node at once, each output line labelled."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import typer
from typer.core import TyperCommand

from labctl.cli import complete
from labctl.cli.common import LabOption, err_console, wants_terminal
from labctl.cli.report import on_interrupt
from labctl.cli.safeprint import print_json
from labctl.cli.shapes import ExecAllOutput
from labctl.errors import UsageError, short_repr
from labctl.lab.handle import LabHandle, open_lab
from labctl.topology.model import NODE_NAME_RE


def labelled(node: str, text: str) -> str:
    """Every line of `text` as "NODE: line" (a missing last newline added)."""
    return "".join(f"{node}: {line}\n" for line in text.splitlines())


def exec_everywhere(handle: LabHandle, command: list[str], as_json: bool = False) -> int:
    """Run `command` in every node in parallel; print each node's output labelled, in the
    lab's node order (stdout to stdout, stderr to stderr), or with as_json one document
    with a record per node. 1 if any node failed, else 0."""
    nodes = handle.node_names()
    on_interrupt(f"lab {handle.lab.name} is untouched, do not `labctl down` it; the "
                 "command may still run in a node where it ignores the hang-up")

    def one(node: str) -> subprocess.CompletedProcess[str]:
        return handle.run(node, command)

    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        results = dict(zip(nodes, pool.map(one, nodes), strict=True))
    if as_json:
        output: ExecAllOutput = {
            "lab": handle.lab.name, "command": command,
            "nodes": [{"node": node, "exit_code": r.returncode, "stdout": r.stdout,
                       "stderr": r.stderr} for node, r in results.items()],
            "failed": [node for node, r in results.items() if r.returncode != 0],
        }
        print_json(output)
    else:
        for node, result in results.items():
            sys.stdout.write(labelled(node, result.stdout))
            sys.stdout.flush()
            sys.stderr.write(labelled(node, result.stderr))
            sys.stderr.flush()
    failed = [f"{node} (exit {r.returncode})" for node, r in results.items()
              if r.returncode != 0]
    if failed:
        err_console.print(f"failed on {len(failed)} of {len(nodes)} nodes: {', '.join(failed)}",
                          markup=False)
        return 1
    return 0


def exec_command(
    node: str = typer.Argument(None, metavar="NODE", help="Node name (not with --all).",
                               autocompletion=complete.node_names),
    command: list[str] = typer.Argument(None, help="Command and arguments (after --).",
                                        metavar="COMMAND"),
    all_nodes: bool = typer.Option(False, "--all", help="Run COMMAND in every node of the "
                                   "lab in parallel; each output line starts with `NODE: `; "
                                   "exit 1 if it failed in any node."),
    as_json: bool = typer.Option(False, "--json", help="With --all: print one JSON document, "
                                 "a record per node with its exit code and output "
                                 "(docs/json.md)."),
    lab: str = LabOption,
) -> None:
    """Run COMMAND in NODE (an interactive shell when no command is given), or with --all
    in every node."""
    if all_nodes:
        # With --all there is no NODE: the first word after `--` is the command's.
        words = ([node] if node is not None else []) + list(command or [])
        if not words:
            raise UsageError("--all needs a command", hint="e.g. `labctl exec --all -- "
                             "ibv_devices`")
        raise typer.Exit(exec_everywhere(open_lab(lab), words, as_json))
    if as_json:
        raise UsageError("--json goes with --all", hint="a command in one node runs attached "
                         "to the terminal; `labctl exec --all --json -- CMD` for records")
    if node is None:
        raise UsageError("missing argument 'NODE'", hint="`labctl exec NODE -- CMD`, or "
                         "`labctl exec --all -- CMD` for every node")
    if not re.fullmatch(NODE_NAME_RE, node):  # before the lab is opened; never echoed whole
        raise UsageError(f"bad node name {short_repr(node)}",
                         hint="node names are a lowercase letter then up to 14 of a-z, 0-9 "
                         "and '-'")
    handle = open_lab(lab)
    argv = handle.argv(node, command or [], tty=wants_terminal(command))
    os.execvp(argv[0], argv)  # the command's exit code becomes ours


# click's UsageError, found through typer's public BadParameter (as labctl/cli/app.py does)
_CLICK_USAGE_ERROR: type[Exception] = {
    cls.__name__: cls for cls in typer.BadParameter.__mro__}["UsageError"]


class ExecCommand(TyperCommand):
    """`labctl exec node1 ls -la`: click takes `-la` for an option of exec's own; say that
    a command's options go after `--` (exit 2), not just "no such option"."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        given = list(args)  # click's parser consumes the list
        try:
            return list(super().parse_args(ctx, args))
        except _CLICK_USAGE_ERROR as exc:
            option = getattr(exc, "option_name", None)
            if type(exc).__name__ != "NoSuchOption" or not option:
                raise
            word = next((a for a in given if a.startswith(option)), option)  # -la, not -l
            own, words, rest = [], [], iter(given)
            for arg in rest:  # exec's own options stay before `--`
                if arg == "--lab":
                    own += [arg, next(rest, "")]
                elif arg in ("--all", "--json") or arg.startswith("--lab="):
                    own.append(arg)
                else:
                    words.append(arg)
            lead = words[:1] if words and words[0] != word and "--all" not in own else []
            example = shlex.join(["labctl", "exec", *own, *lead, "--", *words[len(lead):]])
            raise UsageError(f"no such option: {short_repr(word)[1:-1]} (an option of "
                             "the command's goes after `--`)",
                             hint=f"usage: {' '.join(ctx.get_usage().split()[1:])}; put "
                             f"the command after `--`: {short_repr(example, 200)[1:-1]}; see "
                             "`labctl exec -h`") from None


def register(app: typer.Typer) -> None:
    app.command("exec", cls=ExecCommand)(exec_command)
