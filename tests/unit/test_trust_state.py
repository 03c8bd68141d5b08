"""A lab's state directory is data, never authority (issue 35, item 3; item 5's state dir
with a space).

Each hostile file below is put into a real lab directory of a private state dir; `status`,
`status --json`, `exec`, `devices` and `down` then run through the CLI in-process (under an
alarm: a FIFO must never hang them). They must refuse cleanly (exit 1, a message naming the
file, no traceback), `status --json` must stay valid JSON, `down` must remove the lab, and
nothing outside the lab may be touched: processes recorded or named by a hostile file
survive, a file a planted link points at is unchanged, only the lab's own netns is asked for.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from labctl.images.builder import Image
from labctl.lab import lifecycle
from labctl.net import labnet
from labctl.providers import hostbinds
from labctl.providers.qemu import QemuProvider, plan_lab
from labctl.store.labdir import LabDir
from labctl.store.state import CorruptStateError, LabState, NodeState, Phase, TapState
from labctl.store.state_recorder import StateRecorder
from labctl.topology.load import load_lab
from labctl.topology.resolved import Lab, Mount
from labctl.vm.machine import QemuMachine, node_machine
from tests.unit.clirun import run_main
from tests.unit.fakes import fake_qemu, within

REPO = Path(__file__).resolve().parents[2]
LAB = "ut-trust"
PWNED = "/tmp/labctl-ut-trust-pwned"


@pytest.fixture
def netns_asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every netns `down` deletes (the real call runs: none of these exists)."""
    asked: list[str] = []
    real = labnet.delete_netns

    def spy(name: str, owner: str | None = None) -> bool:
        asked.append(name)
        return real(name, owner)

    monkeypatch.setattr(labnet, "delete_netns", spy)
    return asked


def _cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
         *args: str) -> tuple[int, str, str]:
    with within(30):
        code, out, err = run_main(monkeypatch, capsys, *args)
    assert "Traceback" not in out + err, err
    return code, out, " ".join(err.split())


def _lab(name: str = LAB) -> tuple[LabDir, Lab]:
    lab = dataclasses.replace(load_lab(REPO / "topologies/two-node.yaml"), name=name)
    labdir = LabDir(name)
    labdir.create(lab)
    labdir.save_state(LabState(provider="qemu", phase=Phase.UP,
                               nodes={"node1": NodeState(ssh_port=2222)}))
    return labdir, lab


def _lab_json(labdir: LabDir) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(labdir.lab_file.read_text())
    return data


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


# --- the corpus: hostile files, each a (name, writer) ----------------------------------

def _fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _link_to(target: str) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.unlink(missing_ok=True)
        path.symlink_to(target)
    return write


def _text(text: str | bytes) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.unlink(missing_ok=True)
        path.write_bytes(text.encode() if isinstance(text, str) else text)
    return write


def _huge(path: Path) -> None:
    path.unlink(missing_ok=True)
    with path.open("wb") as out:  # sparse: 100 MB costs no disk
        out.truncate(100 << 20)


def _directory(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.mkdir()


def _state(**changes: Any) -> Callable[[Path], None]:
    """A state.json that is valid but for `changes` (keys of the state or of node1)."""
    def write(path: Path) -> None:
        node = {"ssh_port": 2222, "pid": 0}
        state: dict[str, Any] = {"provider": "qemu", "phase": "up", "nodes": {"node1": node}}
        for key, value in changes.items():
            (node if key in ("pid", "ssh_port", "argv") else state)[key] = value
        text = json.dumps(state, allow_nan=True)
        path.write_text(text.replace('"@inf"', "1e400"))
    return write


# Hostile files of any kind: as state.json and as lab.json.
ANY_FILE: list[tuple[str, Callable[[Path], None]]] = [
    ("fifo", _fifo),
    ("dev-zero-link", _link_to("/dev/zero")),
    ("dev-urandom-link", _link_to("/dev/urandom")),
    ("link-to-etc-passwd", _link_to("/etc/passwd")),
    ("dangling-link", _link_to("/nonexistent/labctl-ut")),
    ("directory", _directory),
    ("huge-sparse-100mb", _huge),
    ("deep-100k-lists", _text(_deep(100_000))),
    ("deep-100k-objects", _text('{"a":' * 100_000 + "1" + "}" * 100_000)),
    ("binary", _text(b"\x00\xff\xfe labctl")),
    ("truncated", _text('{"name": "ut-trust", "nod')),
    ("a-list", _text("[1, 2, 3]")),
    ("a-string", _text('"lab"')),
    ("empty", _text("")),
    ("nan", _text('{"provider": NaN}')),
]

STATE_ONLY: list[tuple[str, Callable[[Path], None]]] = [
    ("ready-nan", _state(ready_seconds=float("nan"))),
    ("ready-infinity", _state(ready_seconds=float("inf"))),
    ("ready-1e400", _state(ready_seconds="@inf")),
    ("ready-string", _state(ready_seconds="soon")),
    ("node-key-dotdot", _state(nodes={"../x": {"pid": 0}})),
    ("node-key-absolute", _state(nodes={"/tmp/x": {"pid": 0}})),
    ("node-key-option", _state(nodes={"-oProxyCommand=touch " + PWNED: {"pid": 0}})),
    ("node-key-empty", _state(nodes={"": {"pid": 0}})),
    ("node-key-newline", _state(nodes={"node1\n": {"pid": 0}})),
    ("node-not-object", _state(nodes={"node1": [1]})),
    ("pid-negative", _state(pid=-1)),
    ("pid-huge", _state(pid=1 << 40)),
    ("pid-bool", _state(pid=True)),
    ("pid-string", _state(pid="1")),
    ("port-string", _state(ssh_port="22 -oProxyCommand=x")),
    ("port-too-big", _state(ssh_port=70000)),
    ("engine-ssh-option", _state(engine={"kind": "vm",
                                         "base_url": "ssh://-oProxyCommand=touch" + PWNED})),
    ("engine-kind", _state(engine={"kind": "remote", "base_url": "unix:///x"})),
    ("phase-unknown", _state(phase="exploded")),
]


def _lab_change(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    """A lab.json that is the lab's own but for `change`."""
    def write(path: Path) -> None:
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))
    return write


def _node1(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda data: data["nodes"][0].__setitem__(key, value)


def _iface(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda data: data["nodes"][0]["interfaces"][0].__setitem__(key, value)


def _top(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda data: data.__setitem__(key, value)


# Host folders a lab.json may not hand a node unless `up` was told so on its command line.
HOST_FOLDERS = [("root", "/", False), ("root-ro", "/", True), ("root-twice", "//", False),
                ("root-dotdot", "/tmp/../", False), ("root-by-proc", "/proc/self/root", False),
                ("etc", "/etc", True), ("root-ssh", "/root/.ssh", True),
                ("home-ssh", "/home/someone/.ssh", True), ("gnupg", "/srv/keys/.gnupg", True),
                ("proc", "/proc", False), ("sys", "/sys", False), ("dev", "/dev", False),
                ("boot", "/boot", False), ("var-lib-labctl", "/var/lib/labctl", False),
                ("home", "/home", False), ("tmp", "/tmp", False)]

LAB_ONLY: list[tuple[str, Callable[[Path], None]]] = [
    ("name-of-another-lab", _lab_change(_top("name", "other-lab"))),
    ("name-path", _lab_change(_top("name", "../../x"))),
    ("provider-unknown", _lab_change(_top("provider", "shell"))),
    ("zero-nodes", _lab_change(_top("nodes", []))),
    ("node-name-option", _lab_change(_node1("name", "-oProxyCommand=touch " + PWNED))),
    ("node-name-dotdot", _lab_change(_node1("name", "../x"))),
    ("node-name-absolute", _lab_change(_node1("name", "/tmp/x"))),
    ("node-name-upper", _lab_change(_node1("name", "Node1"))),
    ("node-name-twice", _lab_change(
        lambda d: d["nodes"][1].__setitem__("name", d["nodes"][0]["name"]))),
    ("image-shell", _lab_change(_node1("image", "trixie;touch " + PWNED))),
    ("image-path", _lab_change(_node1("image", "../../etc"))),
    ("memory-nan", _lab_change(_node1("memory_mib", float("nan")))),
    ("memory-huge", _lab_change(_node1("memory_mib", 1 << 40))),
    ("cpus-zero", _lab_change(_node1("cpus", 0))),
    ("rdma-unknown", _lab_change(_node1("rdma", "rxe;x"))),
    ("package-option", _lab_change(_node1("packages", ["--allow-unauthenticated"]))),
    ("mount-target-etc", _lab_change(_node1("mounts", [
        {"source": "/tmp", "target": "/etc", "readonly": False}]))),
    ("mount-source-relative", _lab_change(_node1("mounts", [
        {"source": "../..", "target": "/work", "readonly": False}]))),
    ("mount-source-newline", _lab_change(_node1("mounts", [
        {"source": "/tmp\n/etc", "target": "/work", "readonly": False}]))),
    # the host folders `up` refuses without --allow-host-mount, as lab.json's sources
    *[(f"mount-source-{label}", _lab_change(_node1("mounts", [
        {"source": source, "target": "/work", "readonly": readonly}])))
      for label, source, readonly in HOST_FOLDERS],
    ("ifname-space", _lab_change(_iface("name", "eth1 x"))),
    ("ifname-long", _lab_change(_iface("name", "a" * 300))),
    ("mac-option", _lab_change(_iface("mac", "02:00:00:00:00:01,romfile=/etc/shadow"))),
    ("ipv4-shell", _lab_change(_iface("ipv4", "10.77.1.1/24; touch " + PWNED))),
    ("mtu-string", _lab_change(_iface("mtu", "1500"))),
    ("segment-out-of-range", _lab_change(_iface("segment", 99))),
    ("route-shell", _lab_change(_node1("routes", [{"to": "10.0.0.0/8 x", "via": "1.2.3.4"}]))),
    ("mirror-option", _lab_change(_top("provider_options",
                                       {"mirror": "--customize-hook=touch " + PWNED}))),
    ("unknown-option", _lab_change(_top("provider_options", {"LD_PRELOAD": "/tmp/x.so"}))),
    ("hosts-ssh-option", _lab_change(_top("provider_options", {
        "hosts": {"h1": "ssh://-oProxyCommand=x"}, "placement": {"node1": "h1"}}))),
]

STATE_CORPUS = ANY_FILE + STATE_ONLY
LAB_CORPUS = ANY_FILE + LAB_ONLY


def _ids(corpus: list[tuple[str, Callable[[Path], None]]]) -> list[str]:
    return [name for name, _ in corpus]


def _assert_removed(labdir: LabDir, down: tuple[int, str, str]) -> None:
    code, out, err = down
    assert code == 0, err
    assert f"lab {labdir.name}" in out and "removed" in out
    assert not labdir.path.exists() and not labdir.path.is_symlink()


@pytest.mark.parametrize(("kind", "hostile"), STATE_CORPUS, ids=_ids(STATE_CORPUS))
def test_a_hostile_state_json(kind: str, hostile: Callable[[Path], None], state_root: Path,
                              netns_asked: list[str], monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    labdir, _ = _lab()
    hostile(labdir.state_file)
    code, out, err = _cli(monkeypatch, capsys, "status", "--json")
    assert code == 1
    [record] = json.loads(out, parse_constant=pytest.fail)["labs"]  # valid JSON, no NaN
    assert record["phase"] == "corrupt" and "state.json is corrupt" in record["error"]
    code, out, err = _cli(monkeypatch, capsys, "status")
    assert code == 1 and "state.json is corrupt" in err and f"down --lab {LAB}" in err
    _assert_removed(labdir, _cli(monkeypatch, capsys, "down", "--lab", LAB))
    assert set(netns_asked) == {labnet.netns_name(LAB)}
    assert not Path(PWNED).exists()


@pytest.mark.parametrize(("kind", "hostile"), LAB_CORPUS, ids=_ids(LAB_CORPUS))
def test_a_hostile_lab_json(kind: str, hostile: Callable[[Path], None], state_root: Path,
                            netns_asked: list[str], monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    labdir, _ = _lab()
    hostile(labdir.lab_file)
    code, out, err = _cli(monkeypatch, capsys, "status", "--json")
    assert code == 1
    [record] = json.loads(out, parse_constant=pytest.fail)["labs"]
    assert record["phase"] == "corrupt" and "lab.json is corrupt" in record["error"]
    for command in (["exec", "--lab", LAB, "node1", "--", "true"],
                    ["devices", "--lab", LAB]):
        code, out, err = _cli(monkeypatch, capsys, *command)
        assert code == 1 and "lab.json is corrupt" in err, (command, err)
    _assert_removed(labdir, _cli(monkeypatch, capsys, "down", "--lab", LAB))
    assert set(netns_asked) == {labnet.netns_name(LAB)}
    assert not Path(PWNED).exists()


def test_a_mount_allowed_at_up_is_kept_outside_the_lab_dir(
        state_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`up --allow-host-mount /etc`: its lab.json reads back; the same lab.json without the
    record (a state dir from elsewhere, or a lab.json edited afterwards) does not, and
    nothing in lab.json can stand in for the record."""
    labdir, lab = _lab()
    node = dataclasses.replace(lab.nodes[0], mounts=(Mount("/etc", "/work", True),))
    lab = dataclasses.replace(lab, nodes=(node, *lab.nodes[1:]))
    labdir.create(lab, (Path("/etc"),))
    assert labdir.load_lab().nodes[0].mounts[0].source == "/etc"
    assert labdir.allowances_file.is_file()
    assert not labdir.allowances_file.is_relative_to(state_root)
    data = json.loads(labdir.lab_file.read_text())
    data["nodes"][0]["mounts"][0]["source"] = "/"  # the record allows /etc only
    labdir.lab_file.write_text(json.dumps(data))
    with pytest.raises(CorruptStateError, match="the host's root directory"):
        labdir.load_lab()
    data["provider_options"]["allow_host_mounts"] = ["/"]  # lab.json cannot allow it
    labdir.lab_file.write_text(json.dumps(data))
    with pytest.raises(CorruptStateError, match="not a value labctl writes there"):
        labdir.load_lab()
    labdir.lab_file.write_text(lab.to_json())
    labdir.allowances_file.chmod(0o600)
    labdir.allowances_file.parent.chmod(0o777)  # not root's own: no record
    with pytest.raises(CorruptStateError, match="a system directory of the host"):
        labdir.load_lab()
    labdir.allowances_file.parent.chmod(0o700)
    labdir.remove()
    assert not labdir.allowances_file.exists()


def test_one_corrupt_lab_does_not_hide_the_others(
        state_root: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    good, _ = _lab("ut-good")
    bad, _ = _lab("ut-bad")
    _fifo(bad.state_file)
    code, out, err = _cli(monkeypatch, capsys, "status", "--json")
    assert code == 1  # the good lab's nodes are not running either: no qemu here
    records = {r["lab"]: r for r in json.loads(out)["labs"]}
    assert records["ut-bad"]["phase"] == "corrupt"
    assert records["ut-good"]["phase"] == "up"
    assert [n["name"] for n in records["ut-good"]["nodes"]] == ["node1", "node2"]
    code, out, err = _cli(monkeypatch, capsys, "status")
    assert "lab ut-good" in out and "lab ut-bad:" in err and "is corrupt" in err
    assert good.path.exists() and bad.path.exists()


# --- processes: only the lab's own qemu, verified ---------------------------------------

def _sleeper(procs: list[subprocess.Popen[bytes]]) -> int:
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    procs.append(proc)
    return proc.pid


def test_down_stops_only_processes_it_verified(
        state_root: Path, tmp_path: Path, spawned: list[subprocess.Popen[bytes]],
        netns_asked: list[str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """state.json names an unrelated `sleep` as node1's qemu, and an absolute node key
    whose "pidfile" is that of a qemu-like process outside the lab; node2's pidfile names
    a recycled pid. Only the lab's own qemu (node3, its pidfile in the lab) is stopped."""
    labdir, _ = _lab()
    sleeper = _sleeper(spawned)
    outside = node_machine(LAB, "x", tmp_path / "outside")
    outside_pid = fake_qemu(outside, spawned)
    own = fake_qemu(node_machine(LAB, "node3", labdir.node_dir("node3")), [])
    labdir.node_dir("node2").mkdir(parents=True)
    (labdir.node_dir("node2") / "qemu.pid").write_text(f"{sleeper}\n")
    state = {"provider": "qemu", "phase": "up", "netns": "host-ns-victim",
             "nodes": {"node1": {"pid": sleeper}, str(tmp_path / "outside"): {
                 "pid": outside_pid}}}
    labdir.state_file.write_text(json.dumps(state))
    code, out, err = _cli(monkeypatch, capsys, "down", "--lab", LAB)
    assert code == 0, err
    assert f"qemu node3 (pid {own})" in " ".join(out.split())
    assert all(proc.poll() is None for proc in spawned)  # the sleep and the outsider
    assert set(netns_asked) == {labnet.netns_name(LAB)}  # never "host-ns-victim"
    assert not labdir.path.exists()


def test_a_valid_state_with_a_foreign_pid_and_netns(
        state_root: Path, spawned: list[subprocess.Popen[bytes]], netns_asked: list[str],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A readable state.json (so not the fallback): its pid and netns are still data."""
    labdir, _ = _lab()
    sleeper = _sleeper(spawned)
    labdir.save_state(LabState(provider="qemu", phase=Phase.UP, netns="host-ns-victim",
                               nodes={"node1": NodeState(pid=sleeper, ssh_port=2222)}))
    code, out, err = _cli(monkeypatch, capsys, "down", "--lab", LAB)
    assert code == 0, err
    assert "sleep" not in out and f"pid {sleeper}" not in out
    assert spawned[0].poll() is None
    assert set(netns_asked) == {labnet.netns_name(LAB)}


def test_symlinked_node_dirs_are_not_followed(
        state_root: Path, tmp_path: Path, spawned: list[subprocess.Popen[bytes]],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """nodes/node1 -> another lab's node directory: its qemu is not this lab's."""
    labdir, _ = _lab()
    other = node_machine("ut-other", "node1", tmp_path / "other" / "nodes" / "node1")
    pid = fake_qemu(other, spawned)
    (labdir.path / "nodes").mkdir()
    labdir.node_dir("node1").symlink_to(other.dir)
    _fifo(labdir.state_file)
    code, out, err = _cli(monkeypatch, capsys, "down", "--lab", LAB)
    assert code == 0, err
    assert spawned[0].poll() is None and f"pid {pid}" not in out
    assert other.pidfile.exists()  # the link went with the lab dir, not its target


# --- links planted in the lab directory --------------------------------------------------

def test_a_symlinked_lab_directory_is_refused_and_unlinked(
        state_root: Path, tmp_path: Path, netns_asked: list[str],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real = LabDir(LAB, tmp_path / "elsewhere")
    real.create(dataclasses.replace(load_lab(REPO / "topologies/two-node.yaml"), name=LAB))
    victim = real.path / "keep-me"
    victim.write_text("precious\n")
    (state_root / LAB).symlink_to(real.path)
    code, out, err = _cli(monkeypatch, capsys, "status", "--json")
    [record] = json.loads(out)["labs"]
    assert code == 1 and record["phase"] == "corrupt" and "symbolic link" in record["error"]
    code, out, err = _cli(monkeypatch, capsys, "exec", "--lab", LAB, "node1", "--", "true")
    assert code == 1 and "symbolic link" in err
    code, out, err = _cli(monkeypatch, capsys, "down", "--lab", LAB)
    assert code == 0 and "not followed" in " ".join(out.split())
    assert not (state_root / LAB).is_symlink()
    assert victim.read_text() == "precious\n" and real.lab_file.exists()
    assert set(netns_asked) == {labnet.netns_name(LAB)}


@pytest.mark.parametrize("name", ["lock.owner", "lock"])
def test_a_symlinked_lock_file_is_not_written_through(
        name: str, state_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    labdir, _ = _lab()
    victim = tmp_path / "victim"
    victim.write_text("root:x:0:0\n")
    before = victim.stat()
    (labdir.path / name).unlink(missing_ok=True)
    (labdir.path / name).symlink_to(victim)
    dangling = tmp_path / "would-be-created"
    (labdir.path / "lock.owner" if name == "lock" else labdir.path / "lock").unlink(
        missing_ok=True)
    (labdir.path / ("lock.owner" if name == "lock" else "lock")).symlink_to(dangling)
    _assert_removed(labdir, _cli(monkeypatch, capsys, "down", "--lab", LAB))
    assert victim.read_text() == "root:x:0:0\n" and victim.stat().st_mtime == before.st_mtime
    assert not dangling.exists()


@pytest.mark.parametrize(("kind", "hostile"), [("fifo", _fifo), ("huge", _huge),
                                               ("dev-zero", _link_to("/dev/zero"))])
def test_a_busy_lab_with_a_hostile_lock_owner(
        kind: str, hostile: Callable[[Path], None], state_root: Path) -> None:
    """Who holds the lock is read from lock.owner: bounded, never blocking."""
    labdir, _ = _lab()
    with labdir.locked("up"):
        hostile(labdir.path / "lock.owner")
        with (within(10), pytest.raises(lifecycle.LabctlError, match=r"busy \(another labctl"),
              labdir.locked("down")):
            pass


def test_a_qemu_pidfile_that_is_a_fifo_or_huge(state_root: Path) -> None:
    labdir, _ = _lab()
    machine = node_machine(LAB, "node1", labdir.node_dir("node1"))
    machine.dir.mkdir(parents=True)
    for hostile in (_fifo, _huge, _link_to("/dev/zero"), _text("12 34"), _text("-1")):
        hostile(machine.pidfile)
        with within(10):
            assert machine.pidfile_pid() == 0


# --- down --all stays in its state dir ---------------------------------------------------

def test_down_all_with_a_separate_state_dir_touches_only_its_labs(
        state_root: Path, tmp_path: Path, netns_asked: list[str],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    mine, _ = _lab("ut-mine")
    half, _ = _lab("ut-half")
    half.lab_file.unlink()  # an `up` that died early: still a lab of this state dir
    _fifo(half.state_file)
    theirs = LabDir("ut-theirs", tmp_path / "other-state")
    theirs.create(dataclasses.replace(load_lab(REPO / "topologies/two-node.yaml"),
                                      name="ut-theirs"))
    (state_root / "Not A Lab").mkdir()  # not labctl's: left alone, never an error

    def no_global_scan() -> list[str]:
        raise AssertionError("down --all looked at every netns of the host")

    monkeypatch.setattr(labnet, "lab_namespaces", no_global_scan)
    code, _out, err = _cli(monkeypatch, capsys, "down", "--all")
    assert code == 0, err
    assert not mine.path.exists() and not half.path.exists()
    assert theirs.path.exists() and (state_root / "Not A Lab").is_dir()
    assert set(netns_asked) == {labnet.netns_name("ut-mine"), labnet.netns_name("ut-half")}


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_down_deletes_only_a_namespace_of_its_own_state_dir(
        state_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Lab names are per state dir, netns names global: `down --lab X` here leaves the
    netns of lab X of another state dir (its loopback's alias names that one's lab dir)."""
    name = f"ut-own-{os.getpid() % 100000}"
    ns = labnet.netns_name(name)
    theirs = LabDir(name, tmp_path / "other-state")
    labnet.delete_netns(ns)
    labnet.create_netns(ns, labnet.owner_mark(theirs.path))
    try:
        code, _out, err = _cli(monkeypatch, capsys, "down", "--lab", name)
        # no such lab in this state dir: a usage error (did you mean...), the netns kept
        assert code == 2 and f"no lab named {name!r}" in err, err
        assert labnet.namespace_exists(ns)
        assert lifecycle.destroy(name) == [] and labnet.namespace_exists(ns)
        mine = LabDir(name)
        assert labnet.netns_owner(ns) != labnet.owner_mark(mine.path)
        labnet.delete_netns(ns)
        labnet.create_netns(ns, labnet.owner_mark(mine.path))
        assert lifecycle.destroy(name) == [f"netns {ns}"]
        assert not labnet.namespace_exists(ns)
    finally:
        labnet.delete_netns(ns)


# --- repair never runs a stored argv -----------------------------------------------------

def test_repair_replans_the_argv_and_taps(state_root: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """state.json's argv says `touch PWNED`, its taps name a host interface: repair starts
    what `create` planned (golden-tested plan_lab), with "{fd:TAP}" placeholders kept."""
    import labctl.providers.qemu as qemu

    labdir, lab = _lab()
    image = Image(tmp_path, tmp_path / "vmlinux", tmp_path / "initrd.cpio",
                  tmp_path / "root.ext4", {})
    monkeypatch.setattr(qemu, "cached_image", lambda recipe, mirror=None: image)
    launched: list[tuple[list[str], list[TapState], str]] = []

    def launch(self: QemuMachine, argv: list[str], taps: list[TapState], netns: str,
               node: str) -> int:
        launched.append((argv, taps, netns))
        return 0

    monkeypatch.setattr(QemuMachine, "launch", launch)
    labdir.save_state(LabState(provider="qemu", phase=Phase.UP, accel="tcg",
                               netns="host-ns-victim", nodes={"node1": NodeState(
                                   ssh_port=40001, argv=["touch", PWNED],
                                   taps=[TapState("eth0", "docker0", 1500)])}))
    QemuProvider(lab, labdir).repair(StateRecorder(labdir, labdir.load_state()), ["node1"],
                                     lambda _m: None)
    [(argv, taps, netns)] = launched
    plan = plan_lab(lab, {n.name: labdir.node_dir(n.name) for n in lab.nodes},
                    {"trixie": image}, "tcg", {"node1": 40001, "node2": 40002}).nodes[0]
    assert argv == plan.argv and argv[0] == "qemu-system-x86_64"
    assert any("{fd:" in a for a in argv)
    assert [t.name for t in taps] == [t.name for t in plan.taps] and "eth0" not in argv
    assert netns == labnet.netns_name(LAB)
    assert labdir.load_state().nodes["node1"].argv == plan.argv  # recorded as planned


def test_repair_without_the_cached_image_says_what_to_do(
        state_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import labctl.providers.qemu as qemu

    labdir, lab = _lab()
    monkeypatch.setattr(qemu, "cached_image", lambda recipe, mirror=None: None)
    with pytest.raises(lifecycle.LabctlError, match="no longer cached") as caught:
        QemuProvider(lab, labdir).repair(StateRecorder(labdir, labdir.load_state()),
                                         ["node1"], lambda _m: None)
    assert caught.value.hint and "labctl down" in caught.value.hint


# --- a state dir whose path has a space --------------------------------------------------

SPACED = ["state dir", "two  spaces", "tab\there", "per%cent", "ünï cödé"]


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs openssh-client")
@pytest.mark.parametrize("dirname", SPACED)
def test_the_ssh_config_of_a_state_dir_with_a_space(dirname: str, tmp_path: Path) -> None:
    from labctl.node import ssh

    labdir = LabDir(LAB, tmp_path / dirname)
    labdir.path.mkdir(parents=True)
    ssh.write_config(labdir.ssh_config, labdir.ssh_key, {"node1": 40001, "node2": 40002},
                     labdir.known_hosts)
    result = subprocess.run(["ssh", "-G", "-F", str(labdir.ssh_config), "node1"],
                            capture_output=True, text=True, check=True, timeout=30)
    parsed: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        key, _, value = line.partition(" ")
        parsed.setdefault(key, []).append(value)
    assert parsed["port"] == ["40001"]
    assert parsed["controlpath"] == [str(labdir.path / "cm-node1")]
    assert parsed["userknownhostsfile"] == [str(labdir.known_hosts)]
    # ssh -G shows IdentityFile before its %-expansion: "%%" is a literal "%" when used
    assert parsed["identityfile"] == [str(labdir.ssh_key).replace("%", "%%")]


@pytest.mark.parametrize("bad", ['quo"te', "back\\slash", "new\nline"])
def test_an_ssh_config_path_that_cannot_be_written_is_refused(bad: str,
                                                              tmp_path: Path) -> None:
    from labctl.node import ssh

    base = tmp_path / bad
    base.mkdir()
    with pytest.raises(lifecycle.LabctlError, match="cannot be written in an ssh config"):
        ssh.write_config(base / "ssh_config", base / "id", {"node1": 1}, base / "kh")


@pytest.mark.parametrize("field", [r"/tmp/a\040b", r"/x\011y\134z", "/plain"])
def test_mountinfo_paths_are_decoded(field: str) -> None:
    decoded = hostbinds.mountinfo_path(field)
    assert "\\0" not in decoded and decoded.startswith("/")
    assert decoded == field.replace(r"\040", " ").replace(r"\011", "\t").replace(
        r"\134", "\\")


@pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts need root")
def test_a_bind_mount_under_a_state_dir_with_a_space_is_undone(tmp_path: Path) -> None:
    """Before the fix `mounted` missed it (mountinfo writes \\040): unbind_all removed the
    directory under a live mount and failed with EBUSY."""
    source = tmp_path / "user folder"
    source.mkdir()
    (source / "file").write_text("kept\n")
    base = tmp_path / "state dir" / "mounts"
    point = base / "node1-0"
    try:
        hostbinds.bind(str(source), point, readonly=True, what="node1")
    except lifecycle.LabctlError as exc:
        pytest.skip(f"no bind mounts here: {exc}")
    try:
        assert hostbinds.mounted(point)
        assert hostbinds.unbind_all(base) == [f"bind mount {point}"]
        assert not base.exists() and (source / "file").read_text() == "kept\n"
    finally:
        if hostbinds.mounted(point):
            subprocess.run(["umount", str(point)], check=False)


HOSTILE_SSH_CONFIGS = [
    f"Host *\n  ProxyCommand touch {PWNED}\n",
    f'Match exec "touch {PWNED}"\n  User root\n',
    f"Host node1\n  LocalCommand touch {PWNED}\n  PermitLocalCommand yes\n",
    "Include /etc/shadow\n",
]


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs openssh-client")
@pytest.mark.parametrize("config", HOSTILE_SSH_CONFIGS)
def test_a_planted_ssh_config_is_rewritten_before_ssh_reads_it(
        config: str, state_root: Path) -> None:
    """ssh runs what its config says as root: exec goes through the config labctl writes
    from state.json's ports, never the one found in the lab directory."""
    labdir, lab = _lab()
    labdir.ssh_config.write_text(config)
    argv = QemuProvider(lab, labdir).exec_argv("node1", ["true"])
    assert argv[:3] == ["ssh", "-F", str(labdir.ssh_config)]
    parsed = subprocess.run(["ssh", "-G", "-F", str(labdir.ssh_config), "node1"],
                            capture_output=True, text=True, check=True, timeout=30).stdout
    keys = {line.partition(" ")[0] for line in parsed.splitlines()}
    assert not keys & {"proxycommand", "localcommand"}
    assert "port 2222" in parsed.splitlines() and "permitlocalcommand no" in parsed
    assert not Path(PWNED).exists()


def test_links_in_a_mounts_directory_are_removed_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "file").write_text("kept\n")
    base = tmp_path / "lab" / "mounts"
    base.mkdir(parents=True)
    (base / "node1-0").symlink_to(victim)
    (base / "node1-1").write_text("not a mount point\n")
    assert hostbinds.unbind_all(base) == []
    assert not base.exists() and (victim / "file").read_text() == "kept\n"
    (tmp_path / "lab" / "mounts").symlink_to(victim)
    assert hostbinds.unbind_all(base) == [] and not base.is_symlink()
    assert (victim / "file").read_text() == "kept\n"


def test_down_closes_every_master_socket_of_a_vagrant_lab(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Vagrant's ssh_config names control sockets by a hash (cm-%C), and a master's process
    title is its socket, not its `-F CONFIG`: `down` closes each socket of the lab's
    directory by name (a CI run left two masters when it asked for cm-NODE)."""
    import socket as socket_module

    from labctl.node import ssh

    config = tmp_path / "ssh_config"
    listeners = []
    for name in ("cm-cda2521655e6", "cm-83dbedcd700e"):
        listener = socket_module.socket(socket_module.AF_UNIX)
        listener.bind(str(tmp_path / name))
        listeners.append(listener)
    (tmp_path / "cm-file").write_text("not a socket")
    (tmp_path / "cm-link").symlink_to(tmp_path / "cm-cda2521655e6")
    asked: list[list[str]] = []

    def exit_master(argv: list[str], **_kwargs: Any) -> subprocess.CompletedProcess[str]:
        asked.append(argv)  # what `ssh -O exit` does to a master: its socket goes
        socket_path = argv[argv.index("-o") + 1].removeprefix("ControlPath=").strip('"')
        os.unlink(socket_path)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(ssh.hostproc, "run", exit_master)
    ssh.close_masters(config, wait=1)
    assert [a[a.index("-o") + 1] for a in asked] == [
        f'ControlPath="{tmp_path}/cm-83dbedcd700e"', f'ControlPath="{tmp_path}/cm-cda2521655e6"']
    assert all(a[:3] == ["ssh", "-F", "/dev/null"] for a in asked)
    assert (tmp_path / "cm-file").exists() and (tmp_path / "cm-link").is_symlink()
    for listener in listeners:
        listener.close()
