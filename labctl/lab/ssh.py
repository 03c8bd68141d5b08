"""The lab's management channel: ssh to each node over a 127.0.0.1 port forward."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from labctl.errors import LabctlError

SSH_OPTIONS = {
    "User": "root",
    "IdentitiesOnly": "yes",
    "StrictHostKeyChecking": "no",
    # Node host keys are made fresh at every boot, on a port only this host can reach.
    "UserKnownHostsFile": "/dev/null",
    "LogLevel": "ERROR",
    "PasswordAuthentication": "no",
    "ControlMaster": "auto",
    "ControlPersist": "300",
    "ServerAliveInterval": "5",
    "ServerAliveCountMax": "6",
    "ConnectTimeout": "20",
}


def make_key(path: Path) -> str:
    """Create the lab's ed25519 key (0600) if missing; return the public key line."""
    if not path.exists():
        try:
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "labctl", "-f", str(path)],
                check=True,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            raise LabctlError(
                "ssh-keygen not found", hint="apt-get install openssh-client"
            ) from None
    os.chmod(path, 0o600)
    return path.with_suffix(".pub").read_text().strip()


def write_config(path: Path, key: Path, ports: dict[str, int]) -> None:
    lines = []
    for node, port in sorted(ports.items()):
        lines += [
            f"Host {node}",
            "  HostName 127.0.0.1",
            f"  Port {port}",
            f"  IdentityFile {key}",
            f"  ControlPath {path.parent}/cm-{node}",
        ]
        lines += [f"  {key_}={value}" for key_, value in SSH_OPTIONS.items()]
        lines.append("")
    path.write_text("\n".join(lines))
    os.chmod(path, 0o600)


def ssh_argv(config: Path, node: str, command: list[str], *, tty: bool = False) -> list[str]:
    argv = ["ssh", "-F", str(config), "-tt" if tty else "-T", node, "--"]
    # ssh joins its arguments with spaces for the remote shell: quote each one.
    return [*argv, shlex.join(command)] if command else argv


def close_masters(config: Path, nodes: list[str]) -> None:
    for node in nodes:
        subprocess.run(
            ["ssh", "-F", str(config), "-O", "exit", node],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
