"""The lab's management channel: ssh to each node over a 127.0.0.1 port forward.

Each node's host key is made by labctl and put into the node (its payload), and
known_hosts in the lab directory pins it (under the node's name, HostKeyAlias): a local
user who grabs a forwarded port cannot pose as a node.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import stat
import time
from pathlib import Path

from labctl import bounded, hostproc
from labctl.errors import LabctlError, short_repr
from labctl.node.procs import pids_with_option
from labctl.store.state import atomic_write
from labctl.topology.model import NODE_NAME_RE

SSH_OPTIONS = {
    "User": "root",
    "IdentitiesOnly": "yes",
    "StrictHostKeyChecking": "yes",
    "LogLevel": "ERROR",
    "PasswordAuthentication": "no",
    "ControlMaster": "auto",
    "ControlPersist": "300",
    "ServerAliveInterval": "5",
    "ServerAliveCountMax": "6",
    "ConnectTimeout": "20",
}


KEYGEN_SECONDS = 60  # ssh-keygen of an ed25519 key: instant, but the host may be busy
CONTROL_SECONDS = 30  # `ssh -O check|exit` talks to a local master's socket
MASTER_SECONDS = 60  # one attempt to start a node's master connection


class MasterError(Exception):
    """The node's sshd did not take a master connection before the deadline."""


def make_key(path: Path) -> str:
    """Create the lab's ed25519 key (0600) if missing; return the public key line.
    Anything but a regular file there (a link, say: ssh-keygen would write through it)
    is removed first, never followed."""
    with contextlib.suppress(FileNotFoundError):
        for each in (path, path.with_suffix(".pub")):
            if not stat.S_ISREG(each.lstat().st_mode):
                each.unlink()
    if not os.path.lexists(path):
        path.with_suffix(".pub").unlink(missing_ok=True)
        hostproc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "labctl", "-f",
                      str(path)], timeout=KEYGEN_SECONDS, what="ssh-keygen (the lab's key)",
                     missing_hint="apt-get install openssh-client")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    try:
        return bounded.read_text(path.with_suffix(".pub"), 4096).strip()
    except (OSError, ValueError) as exc:
        raise LabctlError(f"cannot read {path.with_suffix('.pub')}: {exc}",
                          hint="remove the lab (`labctl down`) and bring it up again") \
            from None


def write_known_hosts(path: Path, host_keys: dict[str, str]) -> None:
    """known_hosts lines `NODE KEYTYPE KEY` (ssh looks them up by HostKeyAlias)."""
    lines = []
    for host, public in sorted(host_keys.items()):
        keytype, key = public.split()[:2]
        lines.append(f"{host} {keytype} {key}\n")
    atomic_write(path, "".join(lines), 0o600)  # a link there is replaced, not followed


def config_path(path: Path) -> str:
    """`path` as an ssh_config value: in double quotes (a state dir may have spaces), '%'
    doubled (ssh expands %-tokens in these paths). ssh_config has no escape for '"' or a
    line break: such a path is refused."""
    text = str(path)
    if any(ch in text for ch in '"\n\r\0\\'):
        raise LabctlError(f"the path {short_repr(text)} cannot be written in an ssh config",
                          hint="use a state directory (LABCTL_STATE_DIR) without quotes, "
                          "backslashes or line breaks in its path")
    return '"' + text.replace("%", "%%") + '"'


def control_path(config: Path, node: str) -> Path:
    return config.parent / f"cm-{node}"


def check_control_paths(directory: Path) -> None:
    """Refuse to talk to a node while a cm-* entry of the lab's directory is not an ssh
    master's socket that this user made: ssh connects through a link there to whatever
    master it names (another lab's, another host's), and sends it our commands."""
    with contextlib.suppress(OSError):
        for path in directory.glob("cm-*"):
            try:
                info = path.lstat()
            except FileNotFoundError:
                continue  # a master exiting meanwhile
            if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.geteuid():
                kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else (
                    "not a socket" if not stat.S_ISSOCK(info.st_mode) else
                    f"a socket of uid {info.st_uid}")
                raise LabctlError(
                    f"{path} is {kind}, not the ssh master socket labctl made; labctl "
                    "does not send commands through it",
                    hint=f"remove it (`rm {shlex.quote(str(path))}`), or `labctl down` "
                    "the lab")


def write_config(path: Path, key: Path, ports: dict[str, int], known_hosts: Path) -> None:
    atomic_write(path, config_text(path, key, ports, known_hosts), 0o600)


def refresh_config(path: Path, key: Path, ports: dict[str, int], known_hosts: Path) -> None:
    """Write the config again unless it holds exactly what labctl writes: ssh runs as root
    what a config says (ProxyCommand, Match exec), and it is a file of the state dir."""
    text = config_text(path, key, ports, known_hosts)
    try:
        if bounded.read_text(path) == text:
            return
    except (OSError, ValueError):
        pass
    atomic_write(path, text, 0o600)


def config_text(path: Path, key: Path, ports: dict[str, int], known_hosts: Path) -> str:
    lines = []
    for node, port in sorted(ports.items()):
        lines += [
            f"Host {host_arg(node)}",
            "  HostName 127.0.0.1",
            f"  Port {port}",
            f"  IdentityFile {config_path(key)}",
            f"  ControlPath {config_path(control_path(path, node))}",
            f"  HostKeyAlias {node}",
            f"  UserKnownHostsFile {config_path(known_hosts)}",
        ]
        lines += [f"  {key_}={value}" for key_, value in SSH_OPTIONS.items()]
        lines.append("")
    return "\n".join(lines)


def host_arg(node: str) -> str:
    """`node` as ssh's host argument: a node name only (lab.json is checked when read;
    this is the last line: a "-oProxyCommand=..." there would be an option of ssh's)."""
    if not re.fullmatch(NODE_NAME_RE, node):
        raise LabctlError(f"{short_repr(node)} is not a node name",
                          hint="the lab's lab.json is corrupt; `labctl down` removes the lab")
    return node


def ssh_argv(config: Path, node: str, command: list[str], *, tty: bool = False,
             options: dict[str, str] | None = None) -> list[str]:
    host_arg(node)
    check_control_paths(config.parent)
    argv = ["ssh", "-F", str(config),
            *(f"-o{key}={value}" for key, value in (options or {}).items()),
            "-tt" if tty else "-T", node, "--"]
    # ssh joins its arguments with spaces for the remote shell: quote each one.
    return [*argv, shlex.join(command)] if command else argv


def start_master(config: Path, host: str, deadline: float) -> None:
    """Open (or keep) `host`'s master connection, retrying until `deadline`."""
    host_arg(host)
    check_control_paths(config.parent)
    try:
        check = hostproc.run(["ssh", "-F", str(config), "-O", "check", host],
                             timeout=CONTROL_SECONDS, check=False)
        if check.returncode == 0:
            return  # its master survived (a repair restarts only the nodes that died)
    except hostproc.HostProcessError as exc:
        if not exc.timed_out:
            raise
        # a master that does not answer its socket is as good as none: start another
    argv = ["ssh", "-F", str(config), "-o", "ControlMaster=yes", "-o", "ControlPersist=yes",
            "-N", "-f", host]
    while True:
        try:
            result = hostproc.run(argv, timeout=MASTER_SECONDS, capture=False, check=False)
        except hostproc.HostProcessError as exc:
            if not exc.timed_out:
                raise
            result = exc.result  # one more attempt that failed: the deadline decides
        if result.returncode == 0:
            return
        if "REMOTE HOST IDENTIFICATION HAS CHANGED" in result.stderr or (
                "Host key verification failed" in result.stderr):
            raise MasterError(f"{host}'s host key is not the one labctl gave it: "
                              f"{result.stderr.strip()}")
        if time.monotonic() > deadline:
            raise MasterError(result.stderr.strip())
        time.sleep(0.5)


def close_masters(config: Path, nodes: list[str] | None = None, wait: float = 5.0) -> None:
    """Ask the masters of `nodes` (None: every master of the lab's directory) to exit;
    return once their control sockets are gone (bounded).

    Not through the lab's ssh_config (a file of the state dir: `down` must not run what
    it might say, such as a ProxyCommand): only the control socket is named. A master's
    process title is its socket ("ssh: DIR/cm-X [mux]"), so the socket is the way to it.
    None is for Vagrant labs, whose sockets are named by a hash (cm-%C)."""
    if nodes is None:
        sockets = _control_sockets(config.parent)
    else:
        # only sockets: `-O exit` through a link would end whatever master it names
        sockets = [cm for node in nodes if re.fullmatch(NODE_NAME_RE, node)
                   and _is_socket(cm := control_path(config, node))]
    for socket in sockets:
        try:
            path = config_path(socket)
        except LabctlError:
            continue  # end_clients still ends what runs with `-F CONFIG`
        try:
            hostproc.run(["ssh", "-F", "/dev/null", "-o", f"ControlPath={path}", "-O", "exit",
                          "--", "labctl-master"], timeout=CONTROL_SECONDS, check=False)
        except hostproc.HostProcessError:
            continue  # a master that does not answer: end_clients ends what it runs
    deadline = time.monotonic() + wait
    while any(os.path.lexists(s) for s in sockets) and time.monotonic() < deadline:
        time.sleep(0.05)


def _is_socket(path: Path) -> bool:
    """A unix socket this user made (never a link to one)."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISSOCK(info.st_mode) and info.st_uid == os.geteuid()


def _control_sockets(directory: Path) -> list[Path]:
    """The unix sockets named cm-* in `directory` (links and other files left alone)."""
    return [path for path in sorted(directory.glob("cm-*")) if _is_socket(path)]


def clients_of(config: Path) -> list[int]:
    """Pids of the ssh processes started with `-F CONFIG` (found in /proc): the masters,
    sessions, and helper starts that `up` left running in the background."""
    wanted = os.fsencode(config)
    return pids_with_option(b"-F", lambda value: value == wanted, program=b"ssh")


def end_clients(config: Path, wait: float = 2.0) -> list[int]:
    """Terminate every ssh process of `config` still running (its node is gone, or going:
    they would end on their own, but `down` must leave nothing, not soon nothing); return
    their pids once they have exited (bounded: SIGKILL after `wait`)."""
    pids = clients_of(config)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)  # our child (in-process up): reap it
            if not set(pids) & set(clients_of(config)):
                return pids
            time.sleep(0.02)
    return pids
