"""Fixtures the unit tests share."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from labctl.store.labdir import LabDir
from tests.unit.standin import make_lab, stand_in_qemu


@pytest.fixture
def state_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private labctl state directory (LABCTL_STATE_DIR), and wide tables."""
    root = tmp_path / "labs"
    root.mkdir()
    monkeypatch.setenv("LABCTL_STATE_DIR", str(root))
    monkeypatch.setenv("COLUMNS", "200")
    return root


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private labctl state directory (LABCTL_STATE_DIR), the terminal's width kept."""
    state = tmp_path / "labs"
    state.mkdir()
    monkeypatch.setenv("LABCTL_STATE_DIR", str(state))
    return state


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts (lock holders, bystanders that must survive `down`...):
    each is killed and reaped after the test, whatever happened."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.fixture(autouse=True)
def _own_records(tmp_path_factory: pytest.TempPathFactory,
                 monkeypatch: pytest.MonkeyPatch) -> Path:
    """labctl's records (saved machines' checksums, mount opt-ins) in a folder of the
    test's own, never the host's /var/lib/labctl/records."""
    records = tmp_path_factory.mktemp("records")
    records.chmod(0o700)
    monkeypatch.setenv("LABCTL_RECORDS_DIR", str(records))
    return records


@pytest.fixture(autouse=True)
def _no_user_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's LABCTL_LAB (the default lab) or LABCTL_DEBUG never reaches a test."""
    monkeypatch.delenv("LABCTL_LAB", raising=False)
    monkeypatch.delenv("LABCTL_DEBUG", raising=False)


@pytest.fixture
def lab_running(state_dir: Path) -> Iterator[LabDir]:
    """Lab ut-replies with both nodes running (stand-in qemu processes, ready consoles):
    tests/unit/standin.py."""
    labdir = make_lab(state_dir)
    procs = [stand_in_qemu(labdir, node) for node in ("node1", "node2")]
    try:
        yield labdir
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory with a short path, for tests that launch a (stand-in) qemu:
    its sockets must fit a socket address (107 bytes), which pytest-xdist's tmp_path under
    /tmp/pytest-of-USER/pytest-N/popen-gwK/TEST_NAME may not leave room for."""
    path = Path(tempfile.mkdtemp(prefix="ut-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
