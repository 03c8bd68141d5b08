"""ssh between a lab's nodes over their data addresses, for programs that start their
workers by ssh (mpirun). Inside the lab only:

- A key pair per lab, made on the host into the lab directory (mpi-ssh/) the first time
  a run needs it, and removed with the lab. Its private key goes to each node as
  /root/.ssh/labctl-mpi; its public key only into /root/.ssh/labctl-mpi.authorized_keys.
- That file is read by a second sshd per node that listens on the node's data address
  alone (the node's own sshd listens on the management address only). The node's
  authorized_keys, which labctl's own access uses, is not touched.
- Host keys: a known_hosts of the nodes' own host keys (read from each node, by address),
  and StrictHostKeyChecking=yes. Nothing is accepted on first use: a node answering with
  another key than the one read from it is refused.
- Stopped after each run (stop_data_sshd): nothing listens between runs.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from labctl import hostproc, safefs
from labctl.errors import LabctlError
from labctl.lab.handle import LabHandle

KEY_NAME = "labctl-mpi"
NODE_KEY = f"/root/.ssh/{KEY_NAME}"
NODE_AUTHORIZED = f"/root/.ssh/{KEY_NAME}.authorized_keys"
NODE_KNOWN_HOSTS = f"/root/.ssh/{KEY_NAME}.known_hosts"
NODE_CONFIG = f"/root/.ssh/{KEY_NAME}.config"
SSHD_PID = "/run/labctl-mpi-sshd.pid"
HOST_KEY = "/etc/ssh/ssh_host_ed25519_key"
_KEY_BYTES = 8 << 10  # an ed25519 key file is under 500 bytes
_PUBLIC_KEY = re.compile(r"^(ssh-ed25519) ([A-Za-z0-9+/]{60,100}={0,2})(?: .*)?$")


def ssh_config() -> str:
    """The ssh client configuration of the lab's ssh (`ssh -F`: the node's other ssh
    configuration is not read)."""
    return (f"Host *\n  IdentityFile {NODE_KEY}\n  IdentitiesOnly yes\n  BatchMode yes\n"
            f"  StrictHostKeyChecking yes\n  UserKnownHostsFile {NODE_KNOWN_HOSTS}\n"
            "  ConnectTimeout 30\n")


def ssh_command() -> str:
    """The ssh a node uses to reach another node's data address (mpirun's rsh agent). A
    configuration file, not -o options: PRRTE passes the agent on to the daemons it starts
    (tree spawn) cut at its first "=" (seen in a node's `ps`)."""
    return f"ssh -F {NODE_CONFIG}"


def lab_key(handle: LabHandle) -> tuple[str, str]:
    """The lab's key pair (private, public), made on first use in the lab directory.
    Read and written without following links (the private key goes into every node: a
    link there must not send a host file), made in a fresh directory and moved in."""
    root = handle.labdir.path
    directory = root / "mpi-ssh"
    private, public = directory / "id_ed25519", directory / "id_ed25519.pub"
    try:
        return (safefs.read_bytes(private, root, _KEY_BYTES).decode(),
                safefs.read_bytes(public, root, _KEY_BYTES).decode())
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    safefs.make_dirs(directory, root, 0o700)
    made = Path(tempfile.mkdtemp(prefix=".mpi-ssh.", dir=root))
    try:
        hostproc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
                      f"labctl-mpi-{handle.lab.name}", "-f", str(made / "key")], timeout=60,
                     what="ssh-keygen (the lab's MPI key)",
                     missing_hint="install openssh-client on this host")
        pair = ((made / "key").read_bytes(), (made / "key.pub").read_bytes())
    except OSError as exc:
        raise LabctlError(f"cannot read the lab's ssh key ssh-keygen made: {exc}",
                          hint="install openssh-client on this host") from None
    finally:
        shutil.rmtree(made, ignore_errors=True)
    safefs.write_bytes(public, pair[1], root, 0o644)
    safefs.write_bytes(private, pair[0], root, 0o600)
    return pair[0].decode(), pair[1].decode()


def public_host_key(text: str) -> str:
    """The "ssh-ed25519 BASE64" of `ssh-keygen -y` output; LabctlError if it is not one."""
    match = _PUBLIC_KEY.match(text.strip())
    if not match:
        raise LabctlError(f"unexpected host key from a node: {text.strip()[:120]!r}")
    return f"{match.group(1)} {match.group(2)}"


def known_hosts(keys: dict[str, str]) -> str:
    """known_hosts text: address -> "ssh-ed25519 BASE64", one line each."""
    return "".join(f"{address} {key}\n" for address, key in keys.items())


# Written by python3 in the node from JSON on stdin: four files of fixed names, 0600.
_INSTALL = (
    "import json, os, sys\n"
    "files = json.load(sys.stdin)\n"
    "os.makedirs('/root/.ssh', mode=0o700, exist_ok=True)\n"
    f"for path in ({NODE_KEY!r}, {NODE_AUTHORIZED!r}, {NODE_KNOWN_HOSTS!r}, {NODE_CONFIG!r}):\n"
    "    fd = os.open(path + '.new', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)\n"
    "    with os.fdopen(fd, 'w') as f:\n"
    "        f.write(files[path])\n"
    "    os.replace(path + '.new', path)\n"
)


def _start_sshd(address: str) -> list[str]:
    """Start the data-address sshd unless it runs (its pid file names a live sshd)."""
    sshd = shlex.join(["/usr/sbin/sshd", "-o", f"ListenAddress={address}:22", "-o",
                       f"PidFile={SSHD_PID}", "-o", f"AuthorizedKeysFile={NODE_AUTHORIZED}"])
    return ["sh", "-c", f"if [ -f {SSHD_PID} ] && kill -0 \"$(cat {SSHD_PID})\" 2>/dev/null; "
            f"then exit 0; fi; mkdir -p /run/sshd; {sshd}"]


STOP_SSHD = ["sh", "-c", f"[ -f {SSHD_PID} ] && kill \"$(cat {SSHD_PID})\" 2>/dev/null; "
             f"rm -f {SSHD_PID}; exit 0"]


def setup_data_ssh(handle: LabHandle, addresses: dict[str, str]) -> None:
    """Give the nodes (node -> data address) ssh to each other over the data addresses:
    the lab's key, a known_hosts of their host keys, an sshd on each data address."""
    private, public = lab_key(handle)
    nodes = list(addresses)

    def read_host_key(node: str) -> str:
        result = handle.run(node, ["ssh-keygen", "-y", "-f", HOST_KEY], timeout=60)
        if result.returncode != 0:
            raise LabctlError(f"cannot read {node}'s ssh host key: "
                              f"{result.stderr.strip()[:200]}")
        return public_host_key(result.stdout)

    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        keys = dict(zip(nodes, pool.map(read_host_key, nodes), strict=True))
    files = json.dumps({NODE_KEY: private, NODE_AUTHORIZED: public,
                        NODE_KNOWN_HOSTS: known_hosts({addresses[n]: keys[n] for n in nodes}),
                        NODE_CONFIG: ssh_config()})

    def install(node: str) -> None:
        wrote = handle.run(node, ["python3", "-c", _INSTALL], input=files, timeout=60)
        started = handle.run(node, _start_sshd(addresses[node]), timeout=60)
        for what, result in (("write its ssh files", wrote), ("start sshd", started)):
            if result.returncode != 0:
                raise LabctlError(f"{node}: cannot {what}: "
                                  f"{(result.stderr or result.stdout).strip()[:300]}")

    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        list(pool.map(install, nodes))


def stop_data_sshd(handle: LabHandle, nodes: list[str]) -> None:
    """Stop the data-address sshds (best effort: a node that is gone has none)."""
    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
        list(pool.map(lambda n: _quiet(handle, n, STOP_SSHD), nodes))


def _quiet(handle: LabHandle, node: str, argv: list[str]) -> None:
    with contextlib.suppress(LabctlError):
        handle.run(node, argv, timeout=30)
