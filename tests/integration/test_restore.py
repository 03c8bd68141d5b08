"""Live: labs restored from a saved machine (`up --boot restore`) are labs like cold ones,
two restored at once from one saved machine keep their own identities, and a saved machine
labctl cannot use is a cold boot with one line saying why.

Lab names: LABCTL_TEST_RESTORE_LABS ("A,B"; default rst-a,rst-b), and A-c, B-c for the
fallbacks (their labs run while A and B are up); LABCTL_TEST_RESTORE_FOUR (rst-four) for the
four-node lab.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from labctl.data.recipes import node_recipe
from labctl.images.builder import cached_image
from labctl.lab import lifecycle
from labctl.lab.handle import LabHandle
from labctl.paths import cache_root
from labctl.store.labdir import LabDir
from labctl.topology.load import load_lab
from labctl.vm.saved import (
    RESTORE_FORMAT,
    MachineShape,
    SavedMachine,
    file_sha256,
    record_made,
    saved_dir,
)
from tests.integration.capturecheck import assert_pingpong_on_the_wire
from tests.integration.conftest import (
    REPO,
    labctl,
    make_topology,
    nothing_left,
    only_record,
    passed_run,
)
from tests.integration.fidelity import node_fidelity

pytestmark = pytest.mark.integration

LABS = tuple(os.environ.get("LABCTL_TEST_RESTORE_LABS", "rst-a,rst-b").split(","))
COLD_LINE = re.compile(r"^labctl: .*booting (it )?cold", re.MULTILINE)


def _up(topology: Path, name: str, env: dict[str, str] | None = None
        ) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "labctl", "up", str(topology), "--name", name, "--boot",
         "restore", "--json"], cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env)


def _finish(proc: subprocess.Popen[str], timeout: float = 900) -> tuple[dict, str]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"up exited {proc.returncode}\n{out}\n{err}"
    return json.loads(out), err


def _restored(name: str, node: str) -> bool:
    """A restored node's console starts where its saved machine waited: no stage 1."""
    console = (LabDir(name).node_dir(node) / "console.log").read_text()
    assert "labctl: ready" in console, console
    return "labctl: stage initramfs" not in console


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_topology(tmp_path_factory.mktemp("restore"), "two-node.yaml", "rst")


@pytest.fixture(scope="module")
def restored_pair(topology: Path) -> Iterator[tuple[dict, dict]]:
    """Two labs restored at once from one saved machine (made first when missing, by a
    first `up` that then goes down: the two at once must both find it)."""
    for name in LABS:
        lifecycle.destroy(name)
    first, _ = _finish(_up(topology, LABS[0]))
    assert first["lab"] == LABS[0]
    lifecycle.destroy(LABS[0])
    procs = [_up(topology, name) for name in LABS]
    results = [_finish(proc) for proc in procs]
    try:
        for (_record, err) in results:
            assert not COLD_LINE.search(err), err
        yield results[0][0], results[1][0]
    finally:
        for name in LABS:
            nothing_left(name, lifecycle.destroy(name))


def test_restored_labs_are_up_like_cold_ones(restored_pair: tuple[dict, dict]) -> None:
    assert [record["lab"] for record in restored_pair] == list(LABS)
    for record in restored_pair:
        assert record["restored"] == ["node1", "node2"]
        nodes = record["status"]["nodes"]
        assert [n["name"] for n in nodes] == ["node1", "node2"]
        for node in nodes:
            assert node["state"] == "running"
            assert [d["port_state"] for d in node["devices"]] == ["ACTIVE"]
            assert _restored(record["lab"], node["name"])


def test_restored_lab_runs_rc_pingpong(restored_pair: tuple[dict, dict]) -> None:
    run = passed_run(restored_pair[0]["lab"], "pingpong", "--transport", "rc", "--iters",
                     "100", "--size", "1024")
    assert run["figures"]["iters"] == 100 and run["figures"]["usec_per_iter"] > 0


def test_restored_devinfo_is_the_c_tools_bytes(restored_pair: tuple[dict, dict]) -> None:
    name = restored_pair[1]["lab"]
    handle = LabHandle(LabDir(name))
    c = handle.run("node2", ["ibv_devinfo", "-v"], timeout=120)
    host = labctl("devinfo", "node2", "-v", "--lab", name, timeout=180)
    assert c.returncode == 0 and "transport:" in c.stdout
    assert host.stdout == c.stdout, host.stderr


def _identity(name: str, node: str) -> dict[str, str]:
    handle = LabHandle(LabDir(name))
    script = ("hostname; cat /sys/class/net/eth0/address /sys/class/net/eth1/address"
              " /sys/class/infiniband/rxe0/node_guid /proc/sys/kernel/random/boot_id;"
              " ssh-keygen -y -f /etc/ssh/ssh_host_ed25519_key | cut -d' ' -f2;"
              " od -An -tx1 -N16 /dev/urandom | tr -d ' \\n'; echo; date +%s")
    result = handle.run(node, ["sh", "-c", script], timeout=120)
    assert result.returncode == 0, result.stderr
    keys = ("hostname", "mgmt_mac", "data_mac", "guid", "boot_id", "host_key", "random",
            "clock")
    values = result.stdout.split()
    assert len(values) == len(keys), result.stdout
    return dict(zip(keys, values, strict=True))


def test_two_restored_labs_have_their_own_identities(
        restored_pair: tuple[dict, dict], topology: Path) -> None:
    import time

    lab_file = load_lab(topology)  # the data MACs derive from the topology's name
    found = {(r["lab"], node): _identity(r["lab"], node)
             for r in restored_pair for node in ("node1", "node2")}
    for (lab, node), identity in found.items():
        topo_node = lab_file.node(node)
        assert identity["hostname"] == node
        assert identity["data_mac"] == topo_node.interfaces[0].mac
        # rxe's node GUID is the EUI-64 of its netdev's MAC (the saved machine had another)
        mac = identity["data_mac"].split(":")
        eui = f"{int(mac[0], 16) ^ 2:02x}{mac[1]}:{mac[2]}ff:fe{mac[3]}:{mac[4]}{mac[5]}"
        assert identity["guid"] == eui
        known = LabDir(lab).known_hosts.read_text()
        assert identity["host_key"] in known  # the key labctl made for this node
        assert abs(int(identity["clock"]) - time.time()) < 120
    for field in ("mgmt_mac", "boot_id", "host_key", "random"):
        values = [identity[field] for identity in found.values()]
        assert len(set(values)) == len(values), (field, values)


# --- four nodes ---------------------------------------------------------------------------
FOUR = os.environ.get("LABCTL_TEST_RESTORE_FOUR", "rst-four")


def test_a_restored_four_node_lab_passes_what_a_cold_one_does(tmp_path: Path) -> None:
    """topologies/four-node.yaml, restored: every port ACTIVE, a captured RC pingpong and an
    rping between nodes other than the first pair, `devinfo -v` byte-equal to the C tool,
    and the four qemus mapping the one saved RAM file (copy on write) under the guard."""
    topology = make_topology(tmp_path, "four-node.yaml", FOUR)
    lifecycle.destroy(FOUR)
    try:
        record, err = _finish(_up(topology, FOUR))
        assert not COLD_LINE.search(err), err
        names = ["node1", "node2", "node3", "node4"]
        assert record["restored"] == names
        for node in record["status"]["nodes"]:
            assert node["state"] == "running"
            assert [d["port_state"] for d in node["devices"]] == ["ACTIVE"]
            assert _restored(FOUR, node["name"])
        captured = labctl("run", "pingpong", "--server", "node3", "--client", "node4",
                          "--transport", "rc", "--iters", "3", "--size", "64", "--lab", FOUR,
                          "--capture-dir", str(tmp_path), "--json", timeout=300)
        run = only_record(captured.stdout)
        assert run["status"] == "passed", captured.stdout + captured.stderr
        assert_pingpong_on_the_wire(run, 3)
        passed_run(FOUR, "rping", "--server", "node4", "--client", "node2")
        handle = LabHandle(LabDir(FOUR))
        c = handle.run("node4", ["ibv_devinfo", "-v"], timeout=120)
        host = labctl("devinfo", "node4", "-v", "--lab", FOUR, timeout=180)
        assert c.returncode == 0 and host.stdout == c.stdout, host.stderr
        ram = os.path.realpath(_saved_path(topology) / "ram")
        state = handle.labdir.load_state()
        for name in names:
            pid = state.nodes[name].pid
            assert any(line.endswith(" " + ram) for line in
                       Path(f"/proc/{pid}/maps").read_text().splitlines()), name
            status = Path(f"/proc/{pid}/status").read_text()
            assert "Seccomp:\t2" in status, name  # the hole-punch guard (filter mode)
    finally:
        nothing_left(FOUR, lifecycle.destroy(FOUR))


# --- a saved machine labctl cannot use -------------------------------------------------
@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A cache of its own (the images linked in): the saved machines this test damages are
    no one else's."""
    images = cache_root() / "images"
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path))
    (tmp_path / "images").symlink_to(images)
    return dict(os.environ)


def _fallback_up(topology: Path, name: str, env: dict[str, str], *,
                 fidelity: bool = False) -> str:
    """Up (a cold boot, the saved machine being unusable) and down again; `fidelity`: a
    cold-booted node is the Debian machine it claims to be, as a restored one is
    (test_lab_core)."""
    lifecycle.destroy(name)
    try:
        record, err = _finish(_up(topology, name, env))
        nodes = record["status"]["nodes"]
        assert [n["state"] for n in nodes] == ["running", "running"]
        assert record["restored"] == []
        assert not any(_restored(name, n["name"]) for n in nodes)  # booted cold
        if fidelity:
            assert node_fidelity(LabHandle(LabDir(name)), "node2") == []
    finally:
        nothing_left(name, lifecycle.destroy(name))
    return err


def _saved_path(topology: Path) -> Path:
    node = load_lab(topology).nodes[0]
    image = cached_image(node_recipe(node.image, node.packages))
    assert image is not None
    return saved_dir(image, MachineShape.of(node, "tcg"))


def test_a_saved_machine_from_an_older_labctl_is_a_cold_boot_with_one_line(
        topology: Path, own_cache: dict[str, str]) -> None:
    path = _saved_path(topology)
    path.mkdir(parents=True)
    (path / "meta.json").write_text(json.dumps({"format": "0", "key": path.name[-16:]}))
    err = _fallback_up(topology, f"{LABS[0]}-c", own_cache, fidelity=True)
    lines = COLD_LINE.findall(err)
    assert len(lines) == 1, err
    assert (f"made by another labctl (restore format '0', this labctl's is "
            f"'{RESTORE_FORMAT}')") in err
    assert "Traceback" not in err and not path.exists()


def test_a_state_qemu_refuses_is_a_cold_boot_with_one_line_per_node(
        topology: Path, own_cache: dict[str, str]) -> None:
    """Checksums right (labctl's record matches), contents garbage: qemu itself refuses it."""
    import hashlib

    path = _saved_path(topology)
    path.mkdir(parents=True)
    state, disk = os.urandom(1 << 20), path / "disk.qcow2"
    (path / "state").write_bytes(state)
    image = cached_image(node_recipe("trixie", ()))
    assert image is not None
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(image.rootfs), "-F",
                    "raw", str(disk)], check=True)
    ram = path / "ram"  # the guest's memory size, all holes
    with ram.open("wb") as f:
        f.truncate(512 << 20)
    (path / "meta.json").write_text(json.dumps({
        "format": RESTORE_FORMAT, "key": path.name[-16:],
        "state_bytes": len(state), "state_sha256": hashlib.sha256(state).hexdigest(),
        "disk_bytes": disk.stat().st_size,
        "disk_sha256": hashlib.sha256(disk.read_bytes()).hexdigest(),
        "ram_bytes": ram.stat().st_size, "ram_sha256": file_sha256(ram)}))
    record_made(SavedMachine(path))  # as if labctl had made it here (else: not used at all)
    err = _fallback_up(topology, f"{LABS[1]}-c", own_cache)
    lines = [ln for ln in err.splitlines() if COLD_LINE.match(ln)]
    assert [ln.split(":")[1].strip() for ln in lines] == ["node1", "node2"], err
    assert all("qemu refused the saved machine" in ln for ln in lines), err
    assert "Traceback" not in err and not path.exists()
