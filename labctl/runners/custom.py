"""`labctl run custom`: the user's own server and client commands as an example spec.

The commands are shell text run with `sh -c` in their nodes (pipes, redirections and
variables are the point). labctl only fills placeholders in: {server_ip}, {client_ip},
{device}, {gid_index} and {port}, each value shell-quoted, so nothing labctl substitutes
can change the command's shape. Literal braces are written twice: `${{HOME}}`,
`awk '{{print $1}}'`.
"""

from __future__ import annotations

import shlex
import string
from typing import Any

from labctl.errors import UsageError, short_repr
from labctl.runners.example_spec import ExampleSpec, RunContext
from labctl.runners.examples import RDMA_DEVICES
from labctl.runners.probes import listening_probe

PLACEHOLDERS = ("server_ip", "client_ip", "device", "gid_index", "port")
DEFAULT_PORT = 18515
MAX_COMMAND = 8192  # characters: a command line, not a script (copy a script with `labctl cp`)
_HINT = ("placeholders: " + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
         + "; write other braces twice, e.g. ${{HOME}} or awk '{{print $1}}'")


def _fields(template: str, flag: str) -> list[tuple[str, str | None]]:
    """(literal text, placeholder or None) pieces of `template`; UsageError when it holds
    an unknown placeholder, a format spec or an unbalanced brace."""
    if len(template) > MAX_COMMAND:
        raise UsageError(f"{flag}: the command is longer than {MAX_COMMAND} characters",
                         hint="put a long script in a file, `labctl cp` it to the node and "
                         "run that")
    if "\0" in template:
        raise UsageError(f"{flag}: the command holds a NUL character",
                         hint="write the command without NUL characters")
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:  # "Single '}' encountered", "expected '}' before end"
        raise UsageError(f"{flag}: {exc} in {short_repr(template)}", hint=_HINT) from None
    pieces: list[tuple[str, str | None]] = []
    for literal, field, spec, conversion in parsed:
        if field is not None and field not in PLACEHOLDERS:
            raise UsageError(f"{flag}: unknown placeholder {{{short_repr(field)[1:-1]}}}",
                             hint=_HINT)
        if spec or conversion:
            raise UsageError(f"{flag}: placeholder {{{field}}} takes no format or conversion",
                             hint=_HINT)
        pieces.append((literal, field))
    return pieces


def check_template(template: str, flag: str) -> str:
    """`template` if its placeholders are right (before the lab is opened)."""
    _fields(template, flag)
    return template


def substitute(template: str, values: dict[str, Any], flag: str) -> str:
    """`template` with every placeholder replaced by its value, shell-quoted."""
    out = []
    for literal, field in _fields(template, flag):
        out.append(literal)
        if field is None:
            continue
        value = values.get(field)
        if value is None:
            raise UsageError(f"{flag}: {{{field}}} has no value in this lab",
                             hint="{gid_index} exists on RoCE (rxe) nodes only; iWARP (siw) "
                             "programs connect through RDMA CM by address")
        out.append(shlex.quote(str(value)))
    return "".join(out)


def side_values(ctx: RunContext, side: str) -> dict[str, Any]:
    """The placeholder values for the server's or the client's command."""
    own = ctx.server if side == "server" else ctx.client
    return {"server_ip": ctx.server.address, "client_ip": ctx.client.address,
            "device": own.device, "gid_index": own.gid_index,
            "port": ctx.opt("port", DEFAULT_PORT)}


def parse_custom(output: str) -> dict[str, Any]:
    """A custom run's figures: what any output has (its programs print what they like)."""
    return {"output_lines": len(output.splitlines()), "output_bytes": len(output.encode())}


def custom_spec(server: str, client: str, *, ready: str | None = None,
                ready_port: int | None = None) -> ExampleSpec:
    """The spec of one custom run; UsageError (exit 2) on a bad template."""
    check_template(server, "--server-cmd")
    check_template(client, "--client-cmd")
    if ready is not None and ready_port is not None:
        raise UsageError("--ready and --ready-port exclude each other",
                         hint="--ready-port N waits for a TCP listener on N; --ready CMD "
                         "waits until CMD exits 0 in the server node")
    probe = None
    if ready is not None:
        check_template(ready, "--ready")

        def probe(ctx: RunContext) -> str:
            return "sh -c " + shlex.quote(substitute(ready, side_values(ctx, "server"),
                                                     "--ready"))
    elif ready_port is not None:
        port = ready_port

        def probe(ctx: RunContext) -> str:
            return listening_probe(port)

    return ExampleSpec(
        name="custom",
        variant="",
        server_argv=lambda ctx: ["sh", "-c", substitute(server, side_values(ctx, "server"),
                                                        "--server-cmd")],
        client_argv=lambda ctx: ["sh", "-c", substitute(client, side_values(ctx, "client"),
                                                        "--client-cmd")],
        parse=parse_custom,
        parse_server=parse_custom,
        devices=RDMA_DEVICES,
        ready_probe=probe,
        key_figure="output_lines",
    )
