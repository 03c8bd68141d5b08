"""`labctl validate` and the host's free memory: a qemu lab whose nodes need more than the
host has free now (MemAvailable) is warned about; more than the host has at all is refused
(exit 2) by the topology checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from labctl.topology import hostmemory
from labctl.topology.catalog import find_topology
from labctl.topology.errors import TopologyError
from labctl.topology.host import HostFacts
from labctl.topology.load import load_lab
from tests.unit.clirun import run_main

# The head of this host's /proc/meminfo (24 GiB, trixie)
MEMINFO = """MemTotal:       24589352 kB
MemFree:        21322452 kB
MemAvailable:   23716904 kB
Buffers:          143340 kB
Cached:          2445956 kB
"""


def meminfo(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(text)
    return path


def test_available_memory_is_read_in_mib(tmp_path: Path) -> None:
    assert hostmemory.available_mib(meminfo(tmp_path, MEMINFO)) == 23716904 >> 10


@pytest.mark.parametrize("text", ["", "MemTotal: 1 kB\n", "MemAvailable: lots kB\n",
                                  "MemAvailable: 12\n", "MemAvailable: 12 MB\n"])
def test_unreadable_or_missing_memavailable_is_unknown(tmp_path: Path, text: str) -> None:
    assert hostmemory.available_mib(meminfo(tmp_path, text)) is None


def test_a_missing_meminfo_is_unknown(tmp_path: Path) -> None:
    assert hostmemory.available_mib(tmp_path / "absent") is None


def test_the_read_is_bounded(tmp_path: Path) -> None:
    # MemAvailable beyond the first 64 KiB is not looked for
    path = meminfo(tmp_path, "X: 1 kB\n" * 10000 + "MemAvailable: 1024 kB\n")
    assert hostmemory.available_mib(path) is None


def test_the_workloads_lab_warns_only_when_it_does_not_fit_the_free_memory() -> None:
    lab = load_lab(find_topology("workloads"))
    assert hostmemory.lab_memory_mib(lab) == 5 * 1024
    assert hostmemory.memory_warning(lab, 5 * 1024) == ""
    assert hostmemory.memory_warning(lab, None) == ""
    warning = hostmemory.memory_warning(lab, 4000)
    assert warning.startswith("the nodes ask for 5120 MiB of memory together; this host "
                              "has 4000 MiB available now (MemAvailable)")


def test_validate_prints_the_warning_and_still_succeeds(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(hostmemory, "available_mib", lambda: 3000)
    code, out, err = run_main(monkeypatch, capsys, "validate", "workloads")
    assert code == 0
    assert out.startswith("lab workloads: 5 nodes")
    assert err.startswith("warning: the nodes ask for 5120 MiB of memory together; this host "
                          "has 3000 MiB available now")


def test_validate_is_quiet_when_the_lab_fits(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(hostmemory, "available_mib", lambda: 6000)
    code, out, err = run_main(monkeypatch, capsys, "validate", "workloads")
    assert (code, err) == (0, "")
    assert "rxe1  rdma rxe on eth1  1024 MiB" in out


def test_the_sixteen_node_lab_against_free_memory(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Sixteen nodes of 512 MiB: 8 GiB together. This host's 23 GiB free says nothing; a
    laptop with 6 GiB free is warned, with the lab's own total."""
    lab = load_lab(find_topology("sixteen-node"))
    assert hostmemory.lab_memory_mib(lab) == 16 * 512
    monkeypatch.setattr(hostmemory, "available_mib", lambda: 23716904 >> 10)
    code, out, err = run_main(monkeypatch, capsys, "validate", "sixteen-node")
    assert (code, err) == (0, "")
    assert out.startswith("lab sixteen-node: 16 nodes, 1 segment, provider qemu")
    monkeypatch.setattr(hostmemory, "available_mib", lambda: 6000)
    code, out, err = run_main(monkeypatch, capsys, "validate", "sixteen-node")
    assert code == 0
    assert err.startswith("warning: the nodes ask for 8192 MiB of memory together; this host "
                          "has 6000 MiB available now")


def test_the_sixteen_node_lab_is_refused_on_a_host_smaller_than_it() -> None:
    """Beyond the host's memory at all it is refused before anything boots (exit 2)."""
    path = find_topology("sixteen-node")
    with pytest.raises(TopologyError) as info:
        load_lab(path, host=HostFacts(memory_mib=8000, cpus=2))
    assert info.value.exit_code == 2
    assert info.value.message == (f"{path}:9: nodes: the nodes ask for 8192 MiB of memory "
                                  "together; this host has 8000 MiB")
    assert load_lab(path, host=HostFacts(memory_mib=8192, cpus=2)).name == "sixteen-node"
