"""The host-side work of one qemu `up`, counted for a lab of 2 and of 16 nodes: the programs
it runs (hostproc.run and the qemu processes it starts), its state.json writes and the
bytes they write, the ssh master connections it opens, the consoles it reads while it
waits. None of them may grow faster than the node count: a sixteen-node lab is eight
times a two-node one, never more (docs/performance.md, "Lab size").

Everything runs as in a real `up` except what needs a host's root, images or guests: the
programs are recorded and not run (an exit 0, no output: `up` reads no program's output on
this path), the qemu processes are recorded and stand in by pid, each node's console is
the one captured from a live node, and the lab's network calls (netlink) are counted.
The boot is cold: a restore does the same host work but for the disk (a file copy
instead of qemu-img) and the helper start, plus its QMP and identity exchanges.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from labctl import hostproc
from labctl.images.builder import Image
from labctl.lab import lifecycle
from labctl.net import labnet
from labctl.providers import qemu as qemu_provider
from labctl.store import labdir as labdir_module
from labctl.store import state as state_module
from labctl.vm import machine as machine_module
from labctl.vm.machine import QemuMachine

ROOT = Path(__file__).resolve().parents[2]
CONSOLE = (Path(__file__).parent / "outputs" / "status" / "node1-console.log").read_text()


@dataclass
class Work:
    """What one `up` did on the host, counted."""

    programs: Counter[str] = field(default_factory=Counter)  # argv[0] (ssh: its -O or -N)
    qemus: int = 0
    state_writes: int = 0
    state_bytes: int = 0
    netlink: Counter[str] = field(default_factory=Counter)
    console_reads: int = 0
    live: set[int] = field(default_factory=set)  # the stand-in qemus' pids

    def ssh_connections(self) -> int:
        return self.programs["ssh master"]

    def figures(self) -> dict[str, int]:
        return {"programs": sum(self.programs.values()), "qemus": self.qemus,
                "state writes": self.state_writes, "state bytes": self.state_bytes,
                "ssh connections": self.ssh_connections(),
                "netlink calls": sum(self.netlink.values()),
                "console reads": self.console_reads}


def _program(argv: list[str]) -> str:
    if argv[0] == "ssh":
        return "ssh master" if "-N" in argv else f"ssh {argv[argv.index('-O') + 1]}" \
            if "-O" in argv else "ssh"
    return Path(argv[0]).name


class _StandInQemu:
    """What launch() keeps of the qemu it starts: its pid, and that it runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> None:
        return None


def _topology(tmp_path: Path, nodes: int) -> Path:
    names = [f"node{i}" for i in range(1, nodes + 1)]
    path = tmp_path / f"scale{nodes}.yaml"
    path.write_text(f"name: ut-scale{nodes}\nnodes:\n"
                    + "".join(f"  {n}: {{}}\n" for n in names)
                    + "links:\n  - name: lan\n    endpoints: ["
                    + ", ".join(f"{n}:eth1" for n in names) + "]\n")
    return path


def _image(tmp_path: Path) -> Image:
    image = tmp_path / "image"
    image.mkdir(exist_ok=True)
    for name in ("vmlinuz", "initrd", "rootfs.raw"):
        (image / name).write_bytes(b"\0" * 4096)
    return Image(image, image / "vmlinuz", image / "initrd", image / "rootfs.raw", {})


def count_up(tmp_path: Path, nodes: int, fault: str = "") -> Work:
    """Run a cold `up` of a one-switch lab of `nodes` nodes, counting its host work
    (`fault`: LABCTL_FAULT for it)."""
    tmp_path.mkdir(parents=True)
    with pytest.MonkeyPatch.context() as monkeypatch:
        state = tmp_path / "labs"
        state.mkdir()
        monkeypatch.setenv("LABCTL_STATE_DIR", str(state))
        if fault:
            monkeypatch.setenv("LABCTL_FAULT", fault)
        return _count_up(tmp_path, monkeypatch, nodes)


def _count_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nodes: int) -> Work:
    work = Work()
    pids = itertools.count(4_000_000)
    image = _image(tmp_path)

    def run(argv: list[str], **_kwargs: Any) -> hostproc.Completed:
        work.programs[_program(list(argv))] += 1
        if argv[0] == "ssh-keygen":  # its product is read back: the real one makes it
            key = Path(argv[argv.index("-f") + 1])
            subprocess.run(list(argv), check=True, capture_output=True, timeout=30)
            assert key.exists()
        # a fresh lab has no master yet: `ssh -O check` fails as ssh does (255)
        return hostproc.Completed(list(argv), 255 if "-O" in argv else 0, "", "")

    real_popen = subprocess.Popen

    def popen(argv: list[str], **kwargs: Any) -> Any:
        if "-pidfile" not in argv:  # subprocess is one module: the real ssh-keygen's run
            return real_popen(argv, **kwargs)
        work.qemus += 1
        node_dir = Path(argv[argv.index("-pidfile") + 1]).parent
        (node_dir / "console.log").write_text(CONSOLE)  # the guest's boot, as captured
        pid = next(pids)
        (node_dir / "qemu.pid").write_text(f"{pid}\n")  # as qemu writes it, at its start
        work.live.add(pid)
        return _StandInQemu(pid)

    real_write = state_module.write_state

    def write_state(path: Path, state: state_module.LabState) -> None:
        work.state_writes += 1
        work.state_bytes += len(state.to_json()) + 1
        real_write(path, state)

    real_console = QemuMachine.console

    def console(self: QemuMachine) -> str:
        work.console_reads += 1
        return real_console(self)

    def netlink(name: str, result: Any = None) -> Any:
        def call(*_args: Any, **_kwargs: Any) -> Any:
            work.netlink[name] += 1
            return os.open(os.devnull, os.O_RDWR) if name == "open_tap" else result
        return call

    monkeypatch.setattr(hostproc, "run", run)
    monkeypatch.setattr(machine_module.subprocess, "Popen", popen)
    monkeypatch.setattr(QemuMachine, "owns", lambda _self, pid: pid in work.live)
    monkeypatch.setattr(QemuMachine, "console", console)
    monkeypatch.setattr(labdir_module, "write_state", write_state)
    monkeypatch.setattr(qemu_provider, "check_qemu_host", lambda: None)
    monkeypatch.setattr(qemu_provider, "build_image", lambda *_a, **_k: image)
    monkeypatch.setattr(qemu_provider, "choose_accel", lambda *_a: "tcg")
    for name in ("create_netns", "add_bridge", "open_tap"):
        monkeypatch.setattr(labnet, name, netlink(name))
    result = lifecycle.up(_topology(tmp_path, nodes),
                          lifecycle.UpOptions(accel="tcg", boot="cold", timeout=30))
    assert result.status["phase"] == "up"
    assert sorted(n["name"] for n in result.status["nodes"]) == sorted(
        f"node{i}" for i in range(1, nodes + 1))
    assert {n["state"] for n in result.status["nodes"]} == {"running"}
    return work


@pytest.fixture(scope="module")
def works() -> Iterator[dict[int, Work]]:
    """One counted `up` of each size, for the module (a short path: the nodes' sockets)."""
    root = Path(tempfile.mkdtemp(prefix="ut-", dir="/tmp"))
    try:
        yield {nodes: count_up(root / str(nodes), nodes) for nodes in (2, 16)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_count_sees_every_kind_of_host_work(works: dict[int, Work]) -> None:
    """Two nodes: what each node costs the host, program by program."""
    work = works[2]
    assert work.programs == Counter({
        "ssh-keygen": 3,  # the lab's key, a host key per node
        "qemu-img": 2,  # a disk per node
        "ssh check": 2, "ssh master": 2,  # a management connection per node
        "setsid": 2,  # the inspector's helper started per node
    })
    assert work.qemus == 2
    assert work.netlink == Counter({"create_netns": 1, "add_bridge": 1, "open_tap": 2})
    # before anything, accel, the nodes started, after create, ready
    assert work.state_writes == 5


def test_state_json_is_written_per_step_not_per_node(works: dict[int, Work]) -> None:
    """Each write is the whole lab's state: one per node made a lab's writes grow with the
    square of its nodes (16 nodes: 20 writes, 335 KB; now 5 writes, 96 KB)."""
    assert works[16].state_writes == works[2].state_writes


@pytest.mark.parametrize("what", ["programs", "qemus", "state writes", "state bytes",
                                  "ssh connections", "netlink calls", "console reads"])
def test_host_work_per_up_grows_no_faster_than_the_nodes(works: dict[int, Work],
                                                         what: str) -> None:
    small, large = works[2].figures(), works[16].figures()
    assert small[what] > 0
    # 8 times the nodes: at most 8 times the work (a lab's fixed part makes it less)
    assert large[what] <= 8 * small[what], (what, small[what], large[what])


def test_nodes_started_before_their_records_are_saved_are_still_found(
        short_tmp: Path) -> None:
    """`up` dying between two qemu starts has saved no node yet: `status` still finds each
    started node by its qemu's pidfile, and says why it has no record."""
    from labctl.errors import LabctlError
    from labctl.providers import provider_for
    from labctl.store.labdir import LabDir

    with pytest.raises(LabctlError, match="fault injected at launched@node2"):
        count_up(short_tmp / "crash", 3, fault="launched@node2:raise")
    labdir = LabDir("ut-scale3", short_tmp / "crash" / "labs")
    assert labdir.load_state().nodes == {}
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(QemuMachine, "owns", lambda _self, pid: pid >= 4_000_000)
        found = {n.name: n for n in provider_for(labdir.load_lab(), labdir).nodes()}
    assert {name: n.state for name, n in found.items()} == {
        "node1": state_module.NodeStatus.UNRECORDED, "node2": state_module.NodeStatus.UNRECORDED,
        "node3": state_module.NodeStatus.ABSENT}
    assert "runs but up stopped before recording it" in found["node1"].reason
