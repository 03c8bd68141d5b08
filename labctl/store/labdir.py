"""The lab directory: everything a running lab made and needs, in one place.

lab.json      the resolved topology (down/status work without the source file)
state.json    what the provider made: netns, per-node pids and ports (labctl/store/state.py)
lock          flock held while up/down change the lab (and until `down` removed it all)
known_hosts   each node's ssh host key, made by labctl and put into the node
id_ed25519    the lab's ssh key (0600), ssh_config for `ssh -F`
nodes/NODE/   disk overlay, initrd, console log, qmp socket
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from labctl import bounded
from labctl.errors import LabctlError, UsageError, short_repr
from labctl.paths import records_root, state_root
from labctl.store.state import (
    CorruptStateError,
    LabState,
    atomic_write,
    read_state,
    write_state,
)
from labctl.topology.model import LAB_NAME_RE, NODE_NAME_RE
from labctl.topology.resolved import Lab
from labctl.topology.stored import check_stored_lab


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
        # One command's state, read once (remember_state): never set across commands.
        self._remembering = False
        self._remembered: LabState | None = None
        self._state_version = 0  # counts the remembered states dropped
        self._state_lock = threading.Lock()  # a command may read from one thread per node

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
        # The name becomes a path that `down` stops processes by: never "/tmp/x" or "../x".
        if not re.fullmatch(NODE_NAME_RE, node):
            raise LabctlError(f"lab {self.name}: {short_repr(node)} is not a node name",
                              hint=f"`labctl down --lab {self.name}` removes the lab")
        return self.path / "nodes" / node

    def node_names_on_disk(self) -> list[str]:
        """The node directories under nodes/ (an `up` may have died before recording
        them): real directories with a node's name only, never a link out of the lab."""
        base = self.path / "nodes"
        if self.is_link() or base.is_symlink() or not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if re.fullmatch(NODE_NAME_RE, p.name)
                      and stat.S_ISDIR(p.lstat().st_mode))

    def is_link(self) -> bool:
        """True if the lab directory is a symbolic link: its files are not the lab's."""
        return self.path.is_symlink()

    def check_real(self) -> None:
        """Refuse a lab directory that is a symbolic link (labctl would act elsewhere)."""
        if self.is_link():
            raise CorruptStateError(self.path, "a symbolic link, not followed", self.name)

    def exists(self) -> bool:
        return self.lab_file.is_file() or self.state_file.is_file()

    def create(self, lab: Lab, allowances: tuple[Path, ...] = ()) -> None:
        """lab.json, and the --allow-host-mount folders `up` was given (kept outside the
        lab directory: lab.json's mounts are checked against them at every read)."""
        self.path.mkdir(parents=True, exist_ok=True, mode=0o750)
        self.check_real()
        os.chmod(self.path, 0o750)
        self._write_allowances(allowances)
        atomic_write(self.lab_file, lab.to_json())

    @property
    def allowances_file(self) -> Path:
        """Where labctl keeps this lab's --allow-host-mount opt-ins: its own records, one
        file per lab directory (a digest of its path: lab names are per state dir)."""
        digest = hashlib.sha256(os.fsencode(os.path.abspath(self.path))).hexdigest()[:24]
        return records_root() / "mounts" / f"{self.name}-{digest}.json"

    def _write_allowances(self, allowances: tuple[Path, ...]) -> None:
        path = self.allowances_file
        if not allowances:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path.parent.parent, 0o700)
        os.chmod(path.parent, 0o700)
        atomic_write(path, json.dumps([str(a) for a in allowances]) + "\n", 0o600)

    def allowances(self) -> tuple[Path, ...]:
        """The --allow-host-mount folders this lab's `up` was given (none if the record is
        missing, unreadable or not root's own)."""
        path = self.allowances_file
        try:
            folder = path.parent.lstat()
            if (not stat.S_ISDIR(folder.st_mode) or folder.st_uid != os.geteuid()
                    or folder.st_mode & 0o022):
                return ()
            value = bounded.loads(bounded.read_text(path, 1 << 20))
        except (OSError, ValueError):
            return ()
        if not isinstance(value, list):
            return ()
        return tuple(Path(v) for v in value if isinstance(v, str) and v.startswith("/"))

    def load_lab(self) -> Lab:
        """lab.json, checked as a topology is (names, addresses, paths) and that it is
        this directory's lab: else CorruptStateError (`down` still removes the lab)."""
        self.check_real()
        try:
            text = bounded.read_text(self.lab_file)
        except FileNotFoundError:
            raise LabctlError(
                f"lab {self.name} has no lab.json in {self.path}",
                hint=f"run `labctl down --lab {self.name}` to clean up",
            ) from None
        except (OSError, ValueError) as exc:
            raise CorruptStateError(self.lab_file, str(exc)[:200], self.name) from None
        try:
            lab = check_stored_lab(Lab.from_json(text), self.allowances())
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            why = f"{type(exc).__name__}: {exc}"[:200]
            raise CorruptStateError(self.lab_file, why, self.name) from None
        if lab.name != self.name:
            raise CorruptStateError(self.lab_file, f"it names lab {short_repr(lab.name)}, not "
                                    "its directory's", self.name)
        return lab

    def load_state(self) -> LabState:
        """The lab's state (an empty one, provider "", before `up` wrote any): read and
        checked at each call, or once per command after remember_state (a copy each time:
        a caller may change what it got)."""
        self.check_real()
        if not self._remembering:
            return self._read_state()
        with self._state_lock:
            if self._remembered is None:
                self._remembered = self._read_state()
            return copy.deepcopy(self._remembered)

    def _read_state(self) -> LabState:
        return read_state(self.state_file, self.name) or LabState(provider="")

    def save_state(self, state: LabState) -> None:
        write_state(self.state_file, state)
        self.forget_state()  # read again, and checked, when next asked for

    def remember_state(self) -> None:
        """Keep the state read for the rest of this command: one command's LabHandle
        (labctl/lab/handle.py) asks this of its own LabDir, never anything that outlives
        a command. What the command itself writes (save_state, the StateRecorder's
        records) and taking the lab's lock drop it (forget_state)."""
        self._remembering = True

    def forget_state(self) -> None:
        """Drop the remembered state: the next load_state reads state.json again."""
        with self._state_lock:
            self._remembered = None
            self._state_version += 1

    def state_version(self) -> int | None:
        """Which remembered state load_state gives now (it changes when one is dropped),
        or None when nothing is remembered: what was made from the state (the qemu
        provider's ssh_config) is then made again at each use."""
        return self._state_version if self._remembering else None

    def lock_holder(self) -> LockHolder | None:
        """Who holds this lab's lock now (an `up` or `down` at work), or None.

        The flock decides, tried without waiting on a descriptor of our own (a shared lock:
        it fails only while an `up` or `down` holds the exclusive one); lock.owner, which
        the holder wrote, only names it. Never creates the lock file or follows a link."""
        if self.is_link():
            return None
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(self.path / "lock", flags)
        except OSError:  # no lock file (no `up` ever took it), or a link planted there
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return parse_lock_owner(_lock_holder(self.path / "lock.owner"))
            return None  # free: closing the descriptor gives our shared lock back
        finally:
            os.close(fd)

    def remove(self) -> bool:
        with contextlib.suppress(OSError):
            self.allowances_file.unlink(missing_ok=True)
        if self.is_link():  # the link only: never what it points at
            self.path.unlink()
            return True
        if not self.path.exists():
            return False
        shutil.rmtree(self.path)
        return True

    # --- lock ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self, action: str) -> Iterator[None]:
        """Exclusive lock on this lab; refuses at once if another labctl holds it."""
        self.path.mkdir(parents=True, exist_ok=True, mode=0o750)
        self.check_real()
        lock_path = self.path / "lock"
        fd = _open_lock(lock_path, self.name)
        try:
            if not _flock_soon(fd):
                raise LabctlError(
                    f"lab {self.name} is busy ({_lock_holder(lock_path.with_suffix('.owner'))})",
                    hint="wait for it to finish, or stop it and run `labctl down`",
                ) from None
            # A new file put in place: a link planted as lock.owner is replaced, never
            # written through.
            atomic_write(lock_path.with_suffix(".owner"), f"{action} by pid {os.getpid()}\n",
                         0o600)
            self.forget_state()  # what is read under the lock is the file's, as it is now
            yield
        finally:
            os.close(fd)


def _open_lock(path: Path, lab: str) -> int:
    """The lab's lock file, opened without following a link. Anything but a regular file
    there (a link that would make labctl create or hold a file elsewhere, a FIFO) is not
    labctl's: it is removed, never followed, and a new lock file made (`down` must work)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(path.lstat().st_mode):
            try:
                path.unlink()
            except OSError as exc:  # a directory, say
                raise CorruptStateError(path, f"not a regular file ({exc.strerror})",
                                        lab) from None
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        raise CorruptStateError(path, f"cannot open it: {exc.strerror}", lab) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced in between
        os.close(fd)
        raise CorruptStateError(path, "not a regular file", lab)
    return fd


@dataclass(frozen=True)
class LockHolder:
    """The labctl command holding a lab's lock, as its lock.owner names it."""

    action: str  # "up" or "down"; "" when lock.owner does not say
    pid: int | None  # None when lock.owner does not say


_OWNER_RE = re.compile(r"(up|down) by pid ([0-9]{1,7})")
# What `status` sees while `locked` is held, and what an `up` or `down` starting at that
# moment waits for before it calls the lab busy (status's probe holds it a few µs).
_LOCK_PATIENCE_SECONDS = 0.5


def parse_lock_owner(text: str) -> LockHolder:
    match = _OWNER_RE.fullmatch(text)
    return LockHolder(match[1], int(match[2])) if match else LockHolder("", None)


def _flock_soon(fd: int) -> bool:
    """The exclusive lock on `fd`, retried for a moment: `status` takes a shared one for
    a few µs to see whether a lab is busy, and must never make an `up` refuse."""
    deadline = time.monotonic() + _LOCK_PATIENCE_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def _lock_holder(path: Path) -> str:
    """Who holds the lock, as lock.owner says (a line; anything odd: "another labctl")."""
    try:
        text = bounded.read_text(path, 200).strip()
    except (OSError, ValueError):
        return "another labctl"
    return text if _OWNER_RE.fullmatch(text) else "another labctl"


def running_labs(root: Path | None = None) -> list[str]:
    """The labs of the state dir: directories with a lab's name and a lab.json (a symlinked
    one too, so that `status` reports it and `down` removes the link)."""
    return [name for name in lab_dir_names(root)
            if os.path.lexists(base_of(root) / name / "lab.json")  # a corrupt one too
            or (base_of(root) / name).is_symlink()]


def base_of(root: Path | None) -> Path:
    return root or state_root()


def lab_dir_names(root: Path | None = None) -> list[str]:
    """Every entry of the state dir with a lab's name (others are not labctl's)."""
    base = base_of(root)
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if re.fullmatch(LAB_NAME_RE, p.name)
                  and (p.is_dir() or p.is_symlink()))


DEFAULT_LAB_ENV = "LABCTL_LAB"


def default_lab() -> str | None:
    """The lab LABCTL_LAB names (checked as --lab is), None when it is unset or empty."""
    value = os.environ.get(DEFAULT_LAB_ENV, "")
    if not value:
        return None
    try:
        return check_lab_name(value)
    except UsageError as exc:
        raise UsageError(f"{DEFAULT_LAB_ENV}: {exc.message}",
                         hint=f"set {DEFAULT_LAB_ENV} to a lab's name, or unset it") from None


def find_labdir(name: str | None) -> LabDir:
    """The lab called `name`; without one, the lab LABCTL_LAB names, else the only lab."""
    # Every refusal here is bad input (exit 2): the lab asked for does not exist, or the
    # command needs a lab and none or several could be meant.
    from_env = name is None and default_lab() is not None
    if name is None:
        name = default_lab()
    if name is not None:
        labdir = LabDir(name)  # "" is refused there, not taken as "the only lab"
        if not labdir.path.exists():
            raise UsageError(
                f"no lab named {short_repr(name)} is up"
                + (f" ({DEFAULT_LAB_ENV} names it)" if from_env else ""),
                hint=f"labs up: {', '.join(running_labs()) or 'none'}"
                + (f"; unset {DEFAULT_LAB_ENV} or give --lab NAME" if from_env else ""),
            )
        return labdir
    labs = running_labs()
    if not labs:
        raise UsageError("no lab is up", hint="start one with `labctl up TOPOLOGY`")
    if len(labs) > 1:
        raise UsageError(
            f"several labs are up ({', '.join(labs)})",
            hint=f"choose one with --lab NAME, or set {DEFAULT_LAB_ENV}=NAME"
        )
    return LabDir(labs[0])
