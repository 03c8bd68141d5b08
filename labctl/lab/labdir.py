"""The lab directory: everything a running lab made and needs, in one place.

lab.json      the resolved topology (down/status work without the source file)
state.json    what the provider made: netns, per-node pids and ports (labctl/lab/state.py)
lock          flock held while up/down change the lab (and until `down` removed it all)
known_hosts   each node's ssh host key, made by labctl and put into the node
id_ed25519    the lab's ssh key (0600), ssh_config for `ssh -F`
nodes/NODE/   disk overlay, initrd, console log, qmp socket
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from labctl.errors import LabctlError, UsageError, short_repr
from labctl.lab.state import CorruptStateError, LabState, atomic_write, read_state, write_state
from labctl.paths import state_root
from labctl.topology.model import LAB_NAME_RE
from labctl.topology.resolved import Lab


def check_lab_name(name: str) -> str:
    """`name` if it is a valid lab name, else UsageError (exit 2).

    fullmatch: with re.match, `$` also matches before a trailing newline ("x\\n")."""
    if not isinstance(name, str) or not re.fullmatch(LAB_NAME_RE, name):
        raise UsageError(f"bad lab name {short_repr(name)}",
                         hint="lab names are a lowercase letter then up to 19 of a-z, 0-9 "
                         "and '-'")
    return name


class LabDir:
    def __init__(self, name: str, root: Path | None = None) -> None:
        # The name becomes a path that `down` removes: "..", "/" or "a/b" must never get there.
        check_lab_name(name)
        self.name = name
        self.path = (root or state_root()) / name

    # --- files ---------------------------------------------------------------------------
    @property
    def lab_file(self) -> Path:
        return self.path / "lab.json"

    @property
    def state_file(self) -> Path:
        return self.path / "state.json"

    @property
    def ssh_key(self) -> Path:
        return self.path / "id_ed25519"

    @property
    def ssh_config(self) -> Path:
        return self.path / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.path / "known_hosts"

    def node_dir(self, node: str) -> Path:
        return self.path / "nodes" / node

    def exists(self) -> bool:
        return self.lab_file.is_file() or self.state_file.is_file()

    def create(self, lab: Lab) -> None:
        self.path.mkdir(parents=True, exist_ok=True, mode=0o750)
        os.chmod(self.path, 0o750)
        atomic_write(self.lab_file, lab.to_json())

    def load_lab(self) -> Lab:
        try:
            return Lab.from_json(self.lab_file.read_text())
        except FileNotFoundError:
            raise LabctlError(
                f"lab {self.name} has no lab.json in {self.path}",
                hint=f"run `labctl down --lab {self.name}` to clean up",
            ) from None
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
            why = f"{type(exc).__name__}: {exc}"[:200]
            raise CorruptStateError(self.lab_file, why, self.name) from None

    def load_state(self) -> LabState:
        """The lab's state (an empty one, provider "", before `up` wrote any)."""
        return read_state(self.state_file, self.name) or LabState(provider="")

    def save_state(self, state: LabState) -> None:
        write_state(self.state_file, state)

    def remove(self) -> bool:
        if not self.path.exists():
            return False
        shutil.rmtree(self.path)
        return True

    # --- lock ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self, action: str) -> Iterator[None]:
        """Exclusive lock on this lab; refuses at once if another labctl holds it."""
        self.path.mkdir(parents=True, exist_ok=True, mode=0o750)
        lock_path = self.path / "lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = lock_path.with_suffix(".owner")
                who = holder.read_text().strip() if holder.exists() else "another labctl"
                raise LabctlError(
                    f"lab {self.name} is busy ({who})",
                    hint="wait for it to finish, or stop it and run `labctl down`",
                ) from None
            lock_path.with_suffix(".owner").write_text(f"{action} by pid {os.getpid()}\n")
            yield
        finally:
            os.close(fd)


@contextlib.contextmanager
def blocking_lock(path: Path) -> Iterator[None]:
    """Wait for the exclusive lock at `path` (a file that outlives what it guards)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def running_labs(root: Path | None = None) -> list[str]:
    base = root or state_root()
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if (p / "lab.json").is_file())


def find_labdir(name: str | None) -> LabDir:
    """The lab called `name`, or the only lab when no name is given."""
    # Every refusal here is bad input (exit 2): the lab asked for does not exist, or the
    # command needs a lab and none or several could be meant.
    if name is not None:
        labdir = LabDir(name)  # "" is refused there, not taken as "the only lab"
        if not labdir.path.exists():
            raise UsageError(
                f"no lab named {short_repr(name)} is up",
                hint=f"labs up: {', '.join(running_labs()) or 'none'}",
            )
        return labdir
    labs = running_labs()
    if not labs:
        raise UsageError("no lab is up", hint="start one with `labctl up TOPOLOGY`")
    if len(labs) > 1:
        raise UsageError(
            f"several labs are up ({', '.join(labs)})", hint="choose one with --lab NAME"
        )
    return LabDir(labs[0])
