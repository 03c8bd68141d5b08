"""A tiny QMP (QEMU Machine Protocol) client: one command per connection."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from labctl.errors import LabctlError


def _read(stream: Any, sock_path: Path) -> dict[str, Any]:
    """One QMP message; qemu closing the socket (EOF) or garbage is a LabctlError."""
    line = stream.readline()
    if not line:
        raise LabctlError(f"qemu closed its control socket {sock_path}",
                          hint="the node's qemu is exiting or gone: see `labctl status`")
    try:
        message = json.loads(line)
    except json.JSONDecodeError:
        raise LabctlError(f"qemu sent a message that is not JSON on {sock_path}: "
                          f"{line[:200]!r}") from None
    if not isinstance(message, dict):
        raise LabctlError(f"unexpected QMP message on {sock_path}: {line[:200]!r}")
    return message


def qmp_command(sock_path: Path, command: str, timeout: float = 5.0, **arguments: Any) -> Any:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(sock_path))
            stream = sock.makefile("rw")
            _read(stream, sock_path)  # greeting
            for message in (
                {"execute": "qmp_capabilities"},
                {"execute": command, "arguments": arguments},
            ):
                stream.write(json.dumps(message) + "\n")
                stream.flush()
                while True:
                    reply = _read(stream, sock_path)
                    if "event" not in reply:
                        break
                if "error" in reply:
                    raise LabctlError(f"qemu refused {command}: {reply['error'].get('desc')}")
            return reply.get("return")
    except OSError as exc:
        raise LabctlError(
            f"cannot reach qemu's control socket {sock_path}: {exc}",
            hint="is the node running? see `labctl status`",
        ) from exc
