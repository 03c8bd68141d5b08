"""A user's own server/client commands as a runner spec: the runner (labctl/runners/
execute.py) starts, bounds, waits for and stops them as it does the built-in examples.

The commands are shell lines run with `sh -c` in the nodes (the user's own code, on the
user's own lab); only the placeholders are filled in, each value quoted for the shell.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from labctl.runners.examples import listening_probe
from labctl.runners.spec import Endpoint, ExampleSpec, RunContext

_PLACEHOLDER = re.compile(r"\{(server_ip|client_ip|device|gid_index|port)\}")


def fill(command: str, ctx: RunContext, own: Endpoint) -> str:
    """`command` with {server_ip} {client_ip} {device} {gid_index} {port} replaced; other
    braces (shell `${X}`, awk's `{print}`) are left as they are."""
    gid = own.gid_index if own.gid_index is not None else 0  # siw: GID 0, no RoCE index
    values = {"server_ip": ctx.server.address, "client_ip": ctx.client.address,
              "device": own.device, "gid_index": str(gid), "port": str(ctx.opt("port"))}
    return _PLACEHOLDER.sub(lambda m: shlex.quote(values[m.group(1)]), command)


def output_figures(output: str) -> dict[str, Any]:
    """A custom program's figures: how much it printed (the runner passes a run on the
    exit codes and a non-empty figure dict; the test asserts on the output itself)."""
    return {"output_lines": len(output.splitlines()), "output_bytes": len(output.encode())}


def custom_spec(server_cmd: str, client_cmd: str, *, ready_port: int | None,
                timeout: float) -> ExampleSpec:
    """The spec; `ready_port` (checked by the caller): the server is ready once something
    listens there."""
    return ExampleSpec(
        name="custom",
        variant="",
        server_argv=lambda ctx: ["sh", "-c", fill(server_cmd, ctx, ctx.server)],
        client_argv=lambda ctx: ["sh", "-c", fill(client_cmd, ctx, ctx.client)],
        parse=output_figures,
        parse_server=output_figures,
        devices=frozenset({"rxe", "siw"}),
        ready_probe=None if ready_port is None else (lambda ctx: listening_probe(ready_port)),
        timeout=timeout,
        key_figure="output_lines",
    )
