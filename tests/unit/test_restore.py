"""Saved machines and restored nodes (labctl/vm/saved.py, restore.py, nodeside/identity.py)
without a VM: the checks a saved machine passes before any restore, its key, the identity
message as the node reads it, the node's answer, and how `up` is told to restore."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from labctl.errors import UsageError
from labctl.images.builder import Image
from labctl.lab import lifecycle
from labctl.nodeside import identity
from labctl.topology.compare import lab_changes
from labctl.topology.load import load_lab
from labctl.topology.stored import check_stored_lab
from labctl.vm import restore, saved
from labctl.vm.machine import QemuMachine, Restore, maps_ram_file_privately
from labctl.vm.saved import MachineShape, Unusable, check_saved

REPO = Path(__file__).resolve().parents[2]
KEY = "0123456789abcdef"


def _image(name: str = "trixie-aaaa") -> Image:
    path = Path("/cache/images") / name
    return Image(path, path / "vmlinux", path / "initrd.cpio", path / "root.ext4",
                 {"kernel": "7.3.4+deb13-amd64"})


TINY = MachineShape("tcg", 1, 1, 1, "rxe")  # 1 MiB of RAM: its file is exactly that


def _disk_image(saved_path: Path) -> Image:
    """An image whose root disk is a small sparse file (what the saved machine at
    `saved_path` is backed by), beside it under a name no listing takes for one."""
    path = saved_path.parent / f".image-of-{saved_path.name}" / "trixie-aaaa"
    path.mkdir(parents=True, exist_ok=True)
    with (path / "root.ext4").open("wb") as f:
        f.truncate(8 << 20)
    return Image(path, path / "vmlinux", path / "initrd.cpio", path / "root.ext4",
                 {"kernel": "7.3.4+deb13-amd64"})


def _qcow2(path: Path, *options: str) -> None:
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", *options, str(path)],
                   check=True)


def _write_saved(path: Path, state: bytes = b"QEVM" + b"\x01" * 4096,
                 ram: bytes = b"\x90" * (1 << 20), record: bool = True,
                 **meta_changes: object) -> Path:
    """A saved machine as make_saved leaves it: its files, meta.json, labctl's record."""
    image = _disk_image(path)
    path.mkdir(parents=True)
    (path / "state").write_bytes(state)
    _qcow2(path / "disk.qcow2", "-b", str(image.rootfs), "-F", "raw")
    disk = (path / "disk.qcow2").read_bytes()
    (path / "ram").write_bytes(ram)
    meta = {"format": saved.RESTORE_FORMAT, "key": KEY,
            "state_bytes": len(state), "state_sha256": hashlib.sha256(state).hexdigest(),
            "disk_bytes": len(disk), "disk_sha256": hashlib.sha256(disk).hexdigest(),
            "ram_bytes": len(ram), "ram_sha256": hashlib.sha256(ram).hexdigest(),
            "made": 1.0, "seconds": 2.0} | meta_changes
    (path / "meta.json").write_text(json.dumps(meta))
    if record:
        saved.record_made(saved.SavedMachine(path))
    return path


def _check(path: Path) -> saved.SavedMachine:
    return check_saved(path, KEY, _disk_image(path), TINY)


def test_a_whole_saved_machine_is_used(tmp_path: Path) -> None:
    path = _write_saved(tmp_path / "m")
    machine = _check(path)
    assert machine.state == path / "state" and machine.disk == path / "disk.qcow2"
    assert machine.restore() == Restore(path / "ram", path / "state")


def test_no_saved_machine_is_not_a_reason_but_absence(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        _check(tmp_path / "none")


@pytest.mark.parametrize(("damage", "reason"), [
    (lambda p: (p / "state").write_bytes(b"QEVM" + b"\x02" * 4096),
     "state does not match the checksum labctl recorded"),
    (lambda p: (p / "state").write_bytes(b"QEVM"), "state is 4 bytes, meta.json says 4100"),
    (lambda p: (p / "disk.qcow2").unlink(), "disk.qcow2 is missing"),
    (lambda p: (p / "ram").unlink(), "ram is missing"),
    (lambda p: (p / "ram").write_bytes(b"\0" * (1 << 20)), "ram does not match the checksum"),
    (lambda p: (p / "meta.json").write_text("{not json"), "meta.json"),
    (lambda p: (p / "meta.json").write_text("x" * (saved.META_BYTES + 1)), "meta.json"),
    (lambda p: (p / "meta.json").write_text(json.dumps({"format": "0", "key": KEY})),
     "made by another labctl (restore format '0', this labctl's is '2')"),
    (lambda p: (p / "meta.json").write_text(json.dumps({"format": "2", "key": "other"})),
     "names another key"),
    (lambda p: (p / "meta.json").write_text(json.dumps({"format": "2", "key": KEY,
                                                         "state_bytes": True})),
     "no valid state size"),
])
def test_a_damaged_or_foreign_saved_machine_is_unusable_with_a_reason(
        tmp_path: Path, damage: object, reason: str) -> None:
    path = _write_saved(tmp_path / "m")
    damage(path)  # type: ignore[operator]
    with pytest.raises(Unusable) as caught:
        _check(path)
    assert reason in str(caught.value)


def test_a_checked_saved_machine_is_not_hashed_again_until_a_file_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write_saved(tmp_path / "m")
    hashed: list[str] = []
    real = saved.file_sha256
    monkeypatch.setattr(saved, "file_sha256",
                        lambda f, *a: hashed.append(f.name) or real(f, *a))
    _check(path)
    assert hashed == []  # recorded when made: the stamps match
    (path / "state").write_bytes(b"QEVM" + b"\x02" * 4096)  # same size, other bytes
    with pytest.raises(Unusable, match="state does not match the checksum"):
        _check(path)
    assert hashed == ["state"]


@pytest.mark.parametrize("record", [b"{not json", b"x" * (saved.META_BYTES + 1),
                                    b'{"sha256": {}, "stamps": {}}'])
def test_an_unreadable_or_stale_record_means_hashing_or_refusal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record: bytes) -> None:
    path = _write_saved(tmp_path / "m")
    kept = saved.SavedMachine(path).record
    good = kept.read_bytes()
    kept.write_bytes(record)
    with pytest.raises(Unusable):
        _check(path)
    stale = json.loads(good)
    stale["stamps"] = {}
    kept.write_text(json.dumps(stale))
    hashed: list[str] = []
    real = saved.file_sha256
    monkeypatch.setattr(saved, "file_sha256",
                        lambda f, *a: hashed.append(f.name) or real(f, *a))
    assert _check(path).path == path
    assert hashed == ["state", "disk.qcow2", "ram"]
    assert json.loads(kept.read_text())["stamps"].keys() == {"state", "disk", "ram"}


def test_a_state_that_is_a_link_is_refused(tmp_path: Path) -> None:
    path = _write_saved(tmp_path / "m")
    target = tmp_path / "elsewhere"
    (path / "state").rename(target)
    (path / "state").symlink_to(target)
    with pytest.raises(Unusable, match="not a regular file"):
        _check(path)


def test_discard_removes_a_saved_machine_and_its_record(tmp_path: Path) -> None:
    path = _write_saved(tmp_path / "m")
    record = saved.SavedMachine(path).record
    assert record.exists()
    saved.discard(path)
    assert not path.exists() and not record.exists()


def test_the_key_changes_with_every_part_of_the_shape_and_the_qemu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(saved, "qemu_version", lambda: "QEMU emulator version 7.2.22")
    base = MachineShape("tcg", 512, 1, 1, "rxe")
    key = saved.saved_key(_image(), base)
    assert key == saved.saved_key(_image(), base) and len(key) == 16
    others = {saved.saved_key(_image(), shape) for shape in (
        MachineShape("kvm", 512, 1, 1, "rxe"), MachineShape("tcg", 1024, 1, 1, "rxe"),
        MachineShape("tcg", 512, 2, 1, "rxe"), MachineShape("tcg", 512, 1, 2, "rxe"),
        MachineShape("tcg", 512, 1, 1, "siw"))}
    others.add(saved.saved_key(_image("trixie-bbbb"), base))
    monkeypatch.setattr(saved, "qemu_version", lambda: "QEMU emulator version 8.2.2")
    others.add(saved.saved_key(_image(), base))
    monkeypatch.setattr(saved, "RESTORE_FORMAT", "3")
    others.add(saved.saved_key(_image(), base))
    assert len(others) == 8 and key not in others


def test_the_saved_machine_has_the_same_devices_as_a_restored_node() -> None:
    """Same device options in the same order (the PCI slots and serial ports the saved
    state describes); only values qemu does not save differ (paths, MACs, ports, name)."""
    from labctl.providers.qemu import plan_lab
    lab = load_lab(REPO / "topologies" / "two-node.yaml")
    image = _image()
    node = lab.nodes[0]
    plan = plan_lab(lab, {n.name: Path("/labs/x") / n.name for n in lab.nodes},
                    {"trixie": image}, "tcg", {n.name: 40000 for n in lab.nodes},
                    {n.name: Restore(Path("/s/ram"), Path("/s/state")) for n in lab.nodes})
    node_argv = plan.nodes[0].argv
    template = saved.template_argv(QemuMachine(Path("/t"), "t"), image,
                                   MachineShape.of(node, "tcg"), 40001,
                                   Restore(Path("/t/ram"), None))

    varying = ("file=", "mac=", "path=", "hostfwd=", "fd=", "id=", "netdev=")

    def devices(argv: list[str]) -> list[str]:
        return [a + " " + ",".join(v for v in argv[i + 1].split(",") if not v.startswith(varying))
                .split(":")[0] for i, a in enumerate(argv)
                if a in ("-device", "-serial", "-chardev", "-netdev", "-drive", "-m", "-smp",
                         "-accel", "-machine")]
    assert devices(template) == devices(node_argv)
    assert devices(template).count("-device virtio-net-pci,romfile=") == 1 + len(node.interfaces)
    assert devices(template)[-2:] == ["-chardev socket,server=on,wait=off",
                                      "-serial chardev"]
    assert "-incoming" in node_argv and "-incoming" not in template
    # the one RAM block, by the same name and size: written through while saving, mapped
    # copy on write by a restore (which alone needs the hole-punch guard)
    ram = "memory-backend-file,id=ram,size=512M,mem-path={},share={}"
    assert ram.format("/t/ram", "on") in template and "memory-backend=ram" in template
    assert ram.format("/s/ram", "off") in node_argv and "memory-backend=ram" in node_argv
    assert maps_ram_file_privately(node_argv) and not maps_ram_file_privately(template)


def test_the_identity_message_reads_back_in_the_node(tmp_path: Path) -> None:
    macs = [("02:00:00:00:00:00", "02:5f:eb:d7:01:00"), ("02:00:00:00:01:00", "02:5f:eb:d7:01:01")]
    before = time.time()
    message = saved.identity_message({"LABCTL_NODE": "node1", "LABCTL_IFACES": "a b"},
                                     "ssh-ed25519 AAAA labctl", b"PRIVATE KEY\n", macs)
    assert message.startswith(b"LABCTL-IDENTITY ")
    read, write = os.pipe()
    os.write(write, message)
    os.close(write)
    try:
        got = identity.read_message(read)
    finally:
        os.close(read)
    files = {f["path"]: (f["mode"], base64.b64decode(f["data"])) for f in got["files"]}
    assert files["/etc/labctl/node.env"] == (0o644, b"LABCTL_NODE=node1\nLABCTL_IFACES='a b'\n")
    assert files["/root/.ssh/authorized_keys"] == (0o600, b"ssh-ed25519 AAAA labctl\n")
    assert files["/etc/ssh/ssh_host_ed25519_key"] == (0o600, b"PRIVATE KEY\n")
    assert got["macs"] == [list(pair) for pair in macs]
    assert before <= got["time"] <= time.time()
    assert len(base64.b64decode(got["entropy"])) == 64


@pytest.mark.parametrize(("data", "reason"), [
    (b"HELLO 12\n{}", "no identity header"),
    (b"LABCTL-IDENTITY 99999999\n", "bad identity length"),
    (b"LABCTL-IDENTITY x1\n", "bad identity length"),
    (b"LABCTL-IDENTITY 10\n{}", "closed mid-message"),
    (b"LABCTL-IDENTITY 2\n[]", "not an object"),
    (b"LABCTL-IDENTITY" + b"9" * 100, "no identity header"),
])
def test_the_node_refuses_a_malformed_identity(data: bytes, reason: str) -> None:
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    try:
        with pytest.raises(ValueError, match=reason):
            identity.read_message(read)
    finally:
        os.close(read)


def test_the_node_writes_only_its_identity_files(tmp_path: Path) -> None:
    for path in ("/bin/sh", "/etc/../bin/sh", "relative"):
        with pytest.raises(ValueError, match="refusing to write"):
            identity.write_file(path, 0o644, b"x")


def test_restored_macs_map_the_saved_machines_nics_to_the_nodes() -> None:
    lab = load_lab(REPO / "topologies" / "two-node.yaml")
    node = lab.nodes[1]
    pairs = restore.restored_macs(lab, node)
    assert pairs[0] == (saved.TEMPLATE_MGMT_MAC, "02:5f:eb:d7:02:00")
    assert pairs[1:] == [("02:00:00:00:01:00", node.interfaces[0].mac)]
    assert node.interfaces[0].mac == "02:5f:eb:d7:02:01"


@pytest.mark.parametrize(("answer", "why"), [
    (b"ok\n", None),
    (b"fail ValueError: no NIC\n", "it refused its identity: 'fail ValueError: no NIC'"),
    (b"", "its identity port closed without an answer"),
    (b"x" * 600, "it refused its identity: '" + "x" * 300 + "'"),
])
def test_the_nodes_answer_is_read_bounded(answer: bytes, why: str | None) -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(answer)
        theirs.close()
        assert restore._answer(ours, time.monotonic() + 5) == why


def test_no_answer_is_a_reason_after_the_deadline() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        assert restore._answer(ours, time.monotonic() + 0.2) == \
            f"no answer to its identity within {restore.ANSWER_SECONDS:.0f} s"


def test_boot_mode_comes_from_the_option_then_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LABCTL_BOOT", raising=False)
    assert lifecycle.UpOptions().boot_mode() == "restore"
    monkeypatch.setenv("LABCTL_BOOT", "cold")
    assert lifecycle.UpOptions().boot_mode() == "cold"
    assert lifecycle.UpOptions(boot="restore").boot_mode() == "restore"
    monkeypatch.setenv("LABCTL_BOOT", "fast")
    with pytest.raises(UsageError, match="LABCTL_BOOT must be restore or cold"):
        lifecycle.UpOptions().check()
    with pytest.raises(UsageError, match="--boot must be restore or cold"):
        lifecycle.UpOptions(boot="warm").check()


def test_a_restored_lab_is_the_same_lab(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LABCTL_BOOT", raising=False)
    topology = REPO / "topologies" / "two-node.yaml"
    cold = lifecycle.resolve(topology, lifecycle.UpOptions(boot="cold"))
    restored = lifecycle.resolve(topology, lifecycle.UpOptions())
    assert "boot" not in cold.provider_options
    assert restored.provider_options["boot"] == "restore"
    assert lab_changes(cold, restored) == [] and lab_changes(restored, cold) == []
    assert check_stored_lab(restored) is restored
    import dataclasses
    bad = dataclasses.replace(restored, provider_options={"accel": "auto", "boot": "$(x)"})
    with pytest.raises(ValueError, match=r"provider_options\.boot"):
        check_stored_lab(bad)


def test_only_qemu_labs_record_a_boot_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LABCTL_BOOT", raising=False)
    topology = REPO / "topologies" / "two-node.yaml"
    docker = lifecycle.resolve(topology, lifecycle.UpOptions(provider="docker"))
    assert "boot" not in docker.provider_options


def test_cold_flag_and_a_contrary_boot_are_refused(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.unit.clirun import run_main
    code, out, err = run_main(monkeypatch, capsys, "up", "two-node", "--cold",
                              "--boot", "restore")
    assert code == 2
    assert "--cold and --boot restore contradict each other" in err
    assert "Traceback" not in out + err


SHAPE = saved.MachineShape("tcg", 512, 1, 1, "rxe")


def _cached_image(cache: Path, key: str = "trixie-aaaa") -> Image:
    """An image directory with a manifest as the builder writes it (files empty)."""
    path = cache / "images" / key
    path.mkdir(parents=True)
    for name in ("vmlinux", "initrd.cpio", "root.ext4"):
        (path / name).write_bytes(b"")
    (path / "manifest.json").write_text(json.dumps({
        "name": "trixie", "key": key, "suite": "trixie", "kernel_suite": "trixie",
        "kernel": "6.12", "rdma_core": "56.1-1", "siw": True, "packages": {},
        "rootfs_bytes": 1 << 20, "build_seconds": 1.0}))
    return Image.at(path)


def test_prune_removes_what_this_labctl_can_never_use(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from labctl.locks import blocking_lock
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path))
    image = _cached_image(tmp_path)
    root = tmp_path / "saved"
    key = saved.saved_key(image, SHAPE)
    shape = dataclasses.asdict(SHAPE)
    keep = _write_saved(root / f"trixie-aaaa-{key}", shape=shape)
    other_key = _write_saved(root / "trixie-aaaa-2222", shape=shape)  # another labctl's
    no_shape = _write_saved(root / "trixie-aaaa-3333")
    bad_shape = _write_saved(root / "trixie-aaaa-8888", shape=shape | {"cpus": "1"})
    image_gone = _write_saved(root / f"trixie-bbbb-{key}", shape=shape)
    locked = _write_saved(root / "trixie-aaaa-5555", shape=shape)
    dead_save = root / ".make-trixie-aaaa-6666-999999999"
    live_save = root / f".make-trixie-aaaa-7777-{os.getpid()}"
    dead_save.mkdir()
    live_save.mkdir()
    with blocking_lock(root / f".{locked.name}.lock"):
        removed = saved.prune(root)
    assert sorted(removed) == sorted([other_key, no_shape, bad_shape, image_gone, dead_save])
    assert keep.exists() and locked.exists() and live_save.exists()
    assert not any(p.exists() for p in removed)


def test_prune_stops_the_qemu_a_killed_labctl_left_saving(tmp_path: Path) -> None:
    """A labctl killed while it saved a machine leaves its qemu running: prune stops it
    (the process whose -pidfile is that work directory's), and never a process another
    work directory's pid file merely names."""
    import subprocess
    import sys

    root = tmp_path / "saved"
    orphan_dir = root / ".make-abcd-999999998"
    decoy_dir = root / ".make-efgh-999999997"
    procs = []
    for work, pidfile in ((orphan_dir, orphan_dir / "qemu.pid"),
                          (decoy_dir, tmp_path / "elsewhere.pid")):
        work.mkdir(parents=True)
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                 "-pidfile", str(pidfile)])
        (work / "qemu.pid").write_text(f"{proc.pid}\n")
        procs.append(proc)
    orphan, decoy = procs
    try:
        removed = saved.prune(root)
        assert sorted(removed) == sorted([orphan_dir, decoy_dir])
        assert orphan.wait(timeout=10) is not None  # stopped
        assert decoy.poll() is None  # not its qemu: left running
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_only_nodes_that_booted_get_the_helper_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restored node's helper runs already (saved warm): `up` starts it only in the
    nodes that booted (cold, a fallback, a repair), whose argv has no -incoming."""
    from labctl.providers import qemu
    from labctl.store.labdir import LabDir
    from labctl.store.state import LabState, NodeState

    lab = load_lab(REPO / "topologies" / "two-node.yaml")
    provider = qemu.QemuProvider(lab, LabDir(lab.name, tmp_path))
    state = LabState(provider="qemu", nodes={
        "node1": NodeState(ssh_port=2201, rdma_dev="rxe0",
                           argv=["qemu-system-x86_64", "-incoming", "exec:cat STATE"]),
        "node2": NodeState(ssh_port=2202, rdma_dev="rxe0", argv=["qemu-system-x86_64"])})
    started: list[dict[Path, list[str]]] = []
    monkeypatch.setattr(qemu, "wait_machines_ready", lambda *args, **kwargs: 0.0)
    monkeypatch.setattr(qemu.QemuProvider, "_refresh_ssh_config", lambda self, state=None: None)
    monkeypatch.setattr(qemu, "start_detached", lambda argvs, root: started.append(argvs))
    provider.wait_ready(state, 60, lambda message: None)
    [argvs] = started
    assert [provider.machine("node2").helper_log] == list(argvs)
    assert "node2" in next(iter(argvs.values()))


def test_a_host_without_the_hole_punch_guard_boots_cold_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No seccomp filter for this host's architecture: no saved machine is made or used
    (restored nodes would share a RAM file qemu 7.2 punches holes in)."""
    from labctl.vm import ramguard
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ramguard.platform, "machine", lambda: "riscv64")
    notes: list[str] = []
    made = saved.find_or_make(_image(), MachineShape("tcg", 512, 1, 1, "rxe"),
                              lambda _: None, notes.append)
    assert made is None and len(notes) == 1
    assert "booting cold" in notes[0] and "'riscv64'" in notes[0]
    assert list(tmp_path.iterdir()) == []


# --- a saved machine from elsewhere: what qemu would open is not labctl's ------------------

def _swap_disk(*options: str) -> Callable[[Path], None]:
    """disk.qcow2 made anew with `options` (a backing file or data file on the host)."""
    def swap(path: Path) -> None:
        disk = path / "disk.qcow2"
        disk.unlink()
        _qcow2(disk, *options)
    return swap


def _host_link(name: str, hard: bool = False, directory: bool = False) -> Callable[[Path], None]:
    def plant(path: Path) -> None:
        decoy = path.parent / "host-file"
        if directory:
            (path.parent / "elsewhere").mkdir()
            for child in path.iterdir():
                child.rename(path.parent / "elsewhere" / child.name)
            path.rmdir()
            path.symlink_to(path.parent / "elsewhere")
            return
        (path / name).rename(decoy)
        if hard:
            os.link(decoy, path / name)
        else:
            (path / name).symlink_to(decoy)
    return plant


def _sparse_ram(size: int) -> Callable[[Path], None]:
    def swap(path: Path) -> None:
        with (path / "ram").open("r+b") as f:
            f.truncate(size)
    return swap


# class -> (how the entry is changed, the reason given)
CACHE_CORPUS: dict[str, tuple[Callable[[Path], None], str]] = {
    "backing-file-on-the-host": (_swap_disk("-b", "/etc/passwd", "-F", "raw", "-o",
                                            "size=1M"), "its backing file is '/etc/passwd'"),
    "backing-format-qcow2": (lambda p: None, ""),  # filled in below (needs the image)
    "no-backing-file": (_swap_disk("-o", "size=1M"), "its backing file is None"),
    "external-data-file": (lambda p: _swap_disk(
        "-o", f"data_file={p.parent / 'host-data'},size=1M")(p),
        "names an external data file"),
    "disk-not-qcow2": (lambda p: (p / "disk.qcow2").write_bytes(  # the same size
        b"\0" * (p / "disk.qcow2").stat().st_size), "not a qcow2 file"),
    "entry-is-a-link": (_host_link("", directory=True), "a symbolic link or not a directory"),
    "state-is-a-link": (_host_link("state"), "state is missing or not a regular file"),
    "disk-is-a-link": (_host_link("disk.qcow2"), "disk.qcow2 is missing or not a regular"),
    "ram-is-a-link": (_host_link("ram"), "ram is missing or not a regular file"),
    "state-hard-link": (_host_link("state", hard=True), "state has 2 hard links"),
    "disk-hard-link": (_host_link("disk.qcow2", hard=True), "disk.qcow2 has 2 hard links"),
    "ram-hard-link": (_host_link("ram", hard=True), "ram has 2 hard links"),
    "ram-64-gib-sparse": (_sparse_ram(64 << 30), "ram is 68719476736 bytes, its shape allows "
                          "exactly 1048576"),
    "ram-short": (_sparse_ram(4096), "its shape allows exactly 1048576"),
    "state-huge-sparse": (lambda p: os.truncate(p / "state", 64 << 30),
                          "state is 68719476736 bytes, its shape allows at most"),
    "no-record (a cache from elsewhere)": (lambda p: saved.SavedMachine(p).record.unlink(),
                                           "labctl has no record of making it"),
    "record-folder-writable-by-others": (
        lambda p: saved.SavedMachine(p).record.parent.chmod(0o777),
        "labctl has no record of making it"),
}


def _backing_qcow2(path: Path) -> None:
    image = _disk_image(path)
    _swap_disk("-u", "-b", str(image.rootfs), "-F", "qcow2", "-o", "size=8M")(path)


CACHE_CORPUS["backing-format-qcow2"] = (_backing_qcow2, "its backing file's format is "
                                        "'qcow2', not 'raw'")


@pytest.mark.parametrize("kind", list(CACHE_CORPUS))
def test_a_saved_machine_qemu_would_open_differently_is_refused_fast(
        tmp_path: Path, kind: str) -> None:
    path = _write_saved(tmp_path / "m")
    decoy = tmp_path / "decoy"
    decoy.write_bytes(b"host file\n")
    damage, reason = CACHE_CORPUS[kind]
    damage(path)
    started = time.monotonic()
    with pytest.raises(Unusable) as caught:
        _check(path)
    assert time.monotonic() - started < 5  # refused from stat and the header, not hashed
    assert reason in str(caught.value)
    assert decoy.read_bytes() == b"host file\n"


def test_making_a_saved_machine_follows_no_planted_link(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`.make-*` links and a `ram` link waiting in the cache: the template's disk,
    initrd and RAM are made in a new directory of labctl's own, never in their targets."""
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path / "cache"))
    image = _cached_image(tmp_path / "cache")
    (image.path / "vmlinux").write_bytes(b"kernel")
    (image.path / "initrd.cpio").write_bytes(b"stage1")
    with (image.path / "root.ext4").open("wb") as f:
        f.truncate(1 << 20)
    shape = saved.MachineShape("tcg", 128, 1, 1, "rxe")
    target = saved.saved_dir(image, shape)
    target.parent.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for planted in (f".make-{target.name}-{os.getpid()}", f".make-{os.getpid()}"):
        (target.parent / planted).symlink_to(elsewhere)
    (elsewhere / "ram").symlink_to(tmp_path / "host-ram")
    made: list[Path] = []

    def stop_before_booting(name: str) -> None:
        made.extend(target.parent.glob(".make-*"))
        raise saved.LabctlError("stopped by the test before qemu")

    monkeypatch.setattr(saved.labnet, "create_netns", lambda name, owner=None:
                        stop_before_booting(name))
    monkeypatch.setattr(saved.labnet, "delete_netns", lambda name, owner=None: False)
    monkeypatch.setattr(saved.ramguard, "supported", lambda: True)
    notes: list[str] = []
    assert saved.find_or_make(image, shape, lambda _: None, notes.append) is None
    assert "could not save a machine" in notes[0]
    assert sorted(os.listdir(elsewhere)) == ["ram"] and not (tmp_path / "host-ram").exists()
    work = [p for p in made if not p.is_symlink()]
    assert len(work) == 1 and sorted(os.listdir(work[0])) >= ["disk.qcow2", "initrd", "ram"]
