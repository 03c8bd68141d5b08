"""A tiny QMP (QEMU Machine Protocol) client: one command per connection."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from labctl.errors import LabctlError


def qmp_command(sock_path: Path, command: str, timeout: float = 5.0, **arguments: Any) -> Any:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(sock_path))
            stream = sock.makefile("rw")
            json.loads(stream.readline())  # greeting
            for message in (
                {"execute": "qmp_capabilities"},
                {"execute": command, "arguments": arguments},
            ):
                stream.write(json.dumps(message) + "\n")
                stream.flush()
                while True:
                    reply = json.loads(stream.readline())
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
