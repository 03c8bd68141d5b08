"""qemu's sockets live in the machine's directory: a directory too deep for a Unix socket's
path is said before qemu starts, and a saved machine is made in a directory short enough."""

from __future__ import annotations

from pathlib import Path

import pytest

from labctl.errors import LabctlError
from labctl.vm.machine import SOCKET_PATH_MAX, QemuMachine


def test_a_machine_directory_too_deep_for_its_sockets_is_refused_before_qemu(
        tmp_path: Path) -> None:
    deep = tmp_path / ("d" * (SOCKET_PATH_MAX - len(str(tmp_path))))
    machine = QemuMachine(deep, "labctl-deep")
    with pytest.raises(LabctlError) as caught:
        machine.launch(["qemu-system-x86_64"], [], "ns-unused", "node1")
    assert "cannot start labctl-deep: its socket" in caught.value.message
    assert f"more than the {SOCKET_PATH_MAX} a Unix socket's path can have" in caught.value.message
    assert "LABCTL_STATE_DIR" in (caught.value.hint or "")
    assert not deep.exists()  # nothing made


def test_the_default_places_fit(tmp_path: Path) -> None:
    """The longest lab and node names under the default state dir, and a saved machine's
    work directory under the default cache, leave room for `identity.sock`."""
    lab_node = Path("/var/lib/labctl/labs") / ("l" * 20) / "nodes" / ("n" * 15)
    work = Path("/root/.cache/labctl/saved") / ".make-abcdefgh-4194304"
    for directory in (lab_node, work):
        assert len(str(QemuMachine(directory, "g").identity_socket)) <= SOCKET_PATH_MAX
