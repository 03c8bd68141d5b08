"""The lab core against live VMs: up, status, exec, RC pingpong, testinfra checks, and a
restored node that is the Debian machine it claims to be (tests/integration/fidelity.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import testinfra

from labctl.lab.handle import LabHandle
from labctl.lab.lifecycle import UpResult
from labctl.store.state import Phase
from labctl.vm.machine import START_HELPER
from tests.integration.conftest import LAB_NAME, labctl, only_record
from tests.integration.fidelity import node_fidelity
from tests.integration.leftovers import lab_leftovers

pytestmark = pytest.mark.integration


def test_up_reports_every_node_ready(lab_up: UpResult) -> None:
    assert lab_up.lab.name == LAB_NAME and lab_up.repaired == []
    state = lab_up.labdir.load_state()
    assert state.phase == Phase.UP
    assert [n.port_state for n in state.nodes.values()] == ["ACTIVE", "ACTIVE"]
    # everything the session's teardown must remove (conftest.nothing_left checks it did)
    made = lab_leftovers(LAB_NAME)
    assert made["netns"] and len(made["qemu"]) == 2 and made["labdir"]
    # a master per node (beside them: up's detached helper starts, which may still run,
    # and for a moment a forking ssh's child, its argv the same as its parent's)
    assert {p.split()[-1] for p in made["ssh"] if "ControlMaster=yes" in p} == {
        "node1", "node2"}


def test_status_json_shows_active_rxe_on_both_nodes() -> None:
    result = labctl("status", "--lab", LAB_NAME, "--json", check=True)
    (status,) = json.loads(result.stdout)["labs"]
    assert [n["name"] for n in status["nodes"]] == ["node1", "node2"]
    for node in status["nodes"]:
        assert node["state"] == "running"
        (device,) = node["devices"]
        assert device["name"] == "rxe0"
        assert device["port_state"] == "ACTIVE"
        assert device["netdev"] == "eth1"
        assert device["gid_index"] == 1  # the IPv4-mapped RoCE v2 GID
        assert device["active_mtu"] == "1024"
    addresses = [n["interfaces"][0]["ipv4"] for n in status["nodes"]]
    assert addresses == ["10.77.1.1/24", "10.77.1.2/24"]


def test_exec_returns_output_and_exit_code(lab_handle: LabHandle) -> None:
    ok = labctl("exec", "--lab", LAB_NAME, "node2", "--", "hostname")
    assert (ok.returncode, ok.stdout.strip()) == (0, "node2")
    failed = labctl("exec", "--lab", LAB_NAME, "node1", "--", "sh", "-c", "echo out; exit 7")
    assert (failed.returncode, failed.stdout) == (7, "out\n")


def test_rc_pingpong_passes_between_the_nodes() -> None:
    result = labctl(
        "run",
        "pingpong",
        "--lab",
        LAB_NAME,
        "--transport",
        "rc",
        "--iters",
        "200",
        "--size",
        "4096",
        "--json",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    record = only_record(result.stdout)
    assert record["status"] == "passed"
    assert record["figures"]["bytes"] == 2 * 200 * 4096
    assert record["figures"]["iters"] == 200
    assert record["figures"]["usec_per_iter"] > 0
    assert "-g" in record["client_argv"]


def test_failed_run_shows_output_and_exits_nonzero() -> None:
    # MTU 300 is within --mtu's range but not an IB MTU: the C program refuses it, labctl
    # must say so.
    result = labctl(
        "run", "pingpong", "--lab", LAB_NAME, "--mtu", "300", "--iters", "5", timeout=300
    )
    assert result.returncode == 1
    assert "failed" in result.stderr
    assert "ibv_rc_pingpong" in result.stderr
    # ... and shows each node's RDMA state as it failed (runners/diagnose.py).
    for node in ("node1", "node2"):
        assert f"--- {node} state at the failure:\nport rxe0/1: 4: ACTIVE" in result.stderr
    assert "cm_id:" in result.stderr and "type GSI" in result.stderr


@pytest.mark.parametrize("node", ["node1", "node2"])
def test_testinfra_sees_rxe_device(lab_handle: LabHandle, node: str) -> None:
    host = testinfra.get_host(f"ssh://{node}", ssh_config=str(lab_handle.labdir.ssh_config))
    assert host.file("/sys/class/infiniband/rxe0").exists
    assert (
        host.file("/sys/class/infiniband/rxe0/ports/1/state").content_string.strip() == "4: ACTIVE"
    )
    devices = host.run("ibv_devices")
    assert devices.rc == 0
    assert "rxe0" in devices.stdout
    assert host.interface("eth1").addresses[0] == lab_handle.lab.node(node).interfaces[0].address
    # the management ssh server is dropbear, keys only (-s), on the management NIC only
    server = host.check_output("tr '\\0' ' ' < /proc/$(cat /run/dropbear.pid)/cmdline").split()
    assert server[0] == "dropbear" and "-s" in server, server
    assert server[server.index("-p") + 1] == "10.0.2.15:22", server


def test_a_restored_node_is_the_debian_machine_it_claims_to_be(lab_handle: LabHandle) -> None:
    """/dev's links and mounts, /run/lock, the required tools, bash's process substitution,
    a loop device with a file system on it: as on Debian, in a node restored from a saved
    machine (the default `up`); PID 1 is tini, as docs/architecture.md says."""
    console = (lab_handle.labdir.node_dir("node1") / "console.log").read_text()
    assert "labctl: ready" in console and "labctl: stage initramfs" not in console, (
        "node1 of the session lab was not restored from a saved machine")
    assert node_fidelity(lab_handle, "node1") == []
    pid1 = lab_handle.run("node1", ["cat", "/proc/1/comm"], timeout=60)
    assert pid1.stdout.strip() == "tini", pid1.stdout + pid1.stderr


def test_management_port_listens_on_loopback_only(lab_handle: LabHandle) -> None:
    state = lab_handle.labdir.load_state()
    assert sorted(state.nodes) == ["node1", "node2"]
    sockets = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True).stdout
    for info in state.nodes.values():
        port = f":{info.ssh_port}"
        listeners = [
            line.split()[3] for line in sockets.splitlines() if line.split()[3].endswith(port)
        ]
        assert listeners == [f"127.0.0.1{port}"]


def _mapping_rss_kib(pid: int, path: Path) -> list[int]:
    """The Rss of each mapping of `path` in process `pid` (from /proc/PID/smaps)."""
    found, inside = [], False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
            inside = fields[-1] == str(path)
        elif inside and fields[0] == "Rss:":
            found.append(int(fields[1]))
    return found


def test_qemu_holds_no_pages_of_its_kernel_and_initrd_once_ready(
        lab_handle: LabHandle) -> None:
    # machine.release_boot_files: the 56 + 5.5 MiB qemu keeps mapped for a reset
    state = lab_handle.labdir.load_state()
    assert sorted(state.nodes) == ["node1", "node2"]
    for name, info in state.nodes.items():
        for boot_file in ("kernel", "initrd"):
            copy = lab_handle.labdir.node_dir(name) / "boot" / boot_file
            assert copy.stat().st_size == 0
            assert _mapping_rss_kib(info.pid, copy) == [0]  # still mapped, nothing resident


@pytest.mark.parametrize("node", ["node1", "node2"])
def test_the_node_gives_its_free_memory_back(lab_handle: LabHandle, node: str) -> None:
    # free page reporting at order 0 through the balloon, and no huge pages under TCG
    # that khugepaged would fill again (machine.py inherit_thp)
    found = labctl("exec", "--lab", LAB_NAME, node, "--", "sh", "-c",
                   "cat /sys/module/page_reporting/parameters/page_reporting_order; "
                   "ls /sys/bus/virtio/drivers/virtio_balloon | grep -c virtio; "
                   "test -d /sys/module/tcp_diag && echo tcp_diag", check=True).stdout
    assert found.split() == ["0", "1", "tcp_diag"]
    state = lab_handle.labdir.load_state()
    status = Path(f"/proc/{state.nodes[node].pid}/status").read_text()
    thp = "0" if state.accel == "tcg" else "1"
    assert f"THP_enabled:\t{thp}\n" in status


@pytest.mark.parametrize("node", ["node1", "node2"])
def test_the_node_reclaims_its_page_cache_once_its_helper_is_up(
        lab_handle: LabHandle, node: str) -> None:
    # start-helper.sh --reclaim-after-helper: memory.reclaim takes mapped pages too
    wait = ("for i in $(seq 600); do test -s /run/labctl/reclaim.log && break; sleep 0.1; "
            "done; cat /run/labctl/reclaim.log")
    log = labctl("exec", "--lab", LAB_NAME, node, "--", "sh", "-c", wait, check=True).stdout
    how, sizes = log.split(": ", 1)
    assert how == "memory.reclaim, drop_caches", log
    kib = [int(word) for word in sizes.split() if word.isdigit()]
    (cached_before, mapped_before, cached_after, mapped_after) = kib
    assert cached_after < cached_before and mapped_after < mapped_before, log
    # a second start (labctl starts every node's helper again after a repair) leaves a
    # node in use alone: the log, and so the reclaim, is the boot's first
    again = [*START_HELPER[:2], "--reclaim-after-helper"]
    labctl("exec", "--lab", LAB_NAME, node, "--", *again, check=True)
    assert labctl("exec", "--lab", LAB_NAME, node, "--", "cat", "/run/labctl/reclaim.log",
                  check=True).stdout == log


def test_second_up_of_the_same_lab_leaves_it_as_it_is(lab_topology: object) -> None:
    result = labctl("up", str(lab_topology))
    assert result.returncode == 0, result.stderr
    assert f"lab {LAB_NAME} is already up" in result.stdout
