"""The docker provider against a real Docker engine: the one in the Docker host VM.

Two container nodes (topologies/docker-two-node.yaml, under a lab name of its own), each
with its own rxe made inside its netns: status, RC pingpong, rping (RDMA CM), inspector
fidelity (C ibv_devinfo vs the Python one in a container), a container node that is the
Debian machine it claims to be (tests/integration/fidelity.py, without loop devices); the
lab is the module's own (modulelab), and its finalizer checks that down left nothing in
the engine or its kernel.
The VM is started on demand by `labctl up` and stopped at the end only if this module
started it (a developer's running VM is left alone). Lab name: LABCTL_DOCKER_TEST_LAB.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from labctl.dockerhost.engine import Engine
from labctl.dockerhost.vm import DockerHostVM
from labctl.lab.handle import LabHandle
from labctl.wire.summary import decode_file
from tests.integration.capturecheck import assert_pingpong_on_the_wire
from tests.integration.conftest import (
    REPO,
    host_folders,
    labctl,
    make_topology,
    only_record,
    passed_run,
)
from tests.integration.fidelity import node_fidelity
from tests.integration.leftovers import docker_leftovers
from tests.integration.modulelab import ModuleLab, module_lab

pytestmark = pytest.mark.integration

LAB = os.environ.get("LABCTL_DOCKER_TEST_LAB", "ditest")
NODES = ("node1", "node2")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Host folders for the nodes' mounts, each with a file written on the host."""
    return host_folders(tmp_path_factory, "docker-folders")


@pytest.fixture(scope="module")
def docker_topology(tmp_path_factory: pytest.TempPathFactory,
                    folders: dict[str, Path]) -> Path:
    # the Docker host VM sees them through its share of labctl's bind mounts
    mounts = [f"{folders['rw']}:/mnt/rw", f"{folders['ro']}:/mnt/ro:ro"]
    return make_topology(tmp_path_factory.mktemp("docker"), "docker-two-node.yaml", LAB,
                         defaults={"mounts": mounts})


@pytest.fixture(scope="module")
def docker_vm() -> Iterator[DockerHostVM]:
    """The Docker host VM, which `labctl up` starts when it is not running: stopped after
    the lab only if this module started it."""
    vm = DockerHostVM()
    started = not vm.running()
    yield vm
    if started:
        labctl("docker-host", "down", check=True)


def _left_in_the_engine(name: str) -> dict[str, list[str]]:
    """The lab in the VM's engine and kernel, and its bind mounts under the VM's share
    (the host folders themselves stay)."""
    mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if f"/docker-host-share/{name}/" in line]
    return {**docker_leftovers(name), "bind mounts": mounts}


docker_lab = module_lab(
    LAB, "docker_topology", up_args=lambda topology: ["--timeout", "600"],
    requires=("docker_vm",), leftovers=_left_in_the_engine,
    down_says=(f"container labctl-{LAB}-node1", f"netns labctl-{LAB}"))


@pytest.fixture(scope="module")
def handle(docker_lab: ModuleLab) -> LabHandle:
    return docker_lab.handle


def engine() -> Engine:
    return Engine("vm", DockerHostVM().base_url)


def test_status_shows_two_running_container_nodes(handle: LabHandle) -> None:
    result = labctl("status", "--lab", LAB, "--json", check=True)
    (status,) = json.loads(result.stdout)["labs"]
    assert status["provider"] == "docker"
    state = handle.labdir.load_state()
    assert state.engine is not None and state.engine.kind == "vm"
    for node in status["nodes"]:
        assert node["state"] == "running", node
        assert node["details"]["container"] == f"labctl-{LAB}-{node['name']}"
        own = state.nodes[node["name"]].rdma_dev
        assert own == f"rxe_{LAB}_{node['name']}"
        assert handle.rdma_device(node["name"]) == own
        assert own in [d["name"] for d in node["devices"]]
        assert {d["name"]: d for d in node["devices"]}[own]["port_state"] == "ACTIVE"


def test_containers_are_labelled_and_not_privileged(handle: LabHandle) -> None:
    client = engine().client()
    try:
        found = client.containers.list(filters={"label": f"labctl.lab={LAB}"})
        assert sorted(c.labels["labctl.node"] for c in found) == list(NODES)
        for container in found:
            host = container.attrs["HostConfig"]
            assert host["Privileged"] is False
            assert host["NetworkMode"] == "none"
            assert host["CapAdd"] == ["NET_ADMIN"]
            assert host["DeviceCgroupRules"][0] == "c 231:* rwm"
            assert host["DeviceCgroupRules"][1].startswith("c 10:")
    finally:
        client.close()


def test_a_container_node_is_the_debian_machine_it_claims_to_be(handle: LabHandle) -> None:
    """What Debian gives every program, as in a qemu node (test_lab_core), except loop
    devices and the kernel's own file systems: the engine's kernel is shared and a
    container may not mount (docs/docker.md)."""
    assert node_fidelity(handle, "node2", own_kernel=False) == []
    pid1 = handle.run("node2", ["cat", "/proc/1/comm"], timeout=60)
    assert pid1.stdout.strip() == "tini", pid1.stdout + pid1.stderr


def test_each_node_knows_its_device(handle: LabHandle) -> None:
    for node in NODES:
        result = handle.run(node, ["sh", "-c", ". /etc/labctl/node.env; "
                                   "echo $LABCTL_RDMA_DEV; printenv LABCTL_RDMA_DEV"], timeout=60)
        assert result.stdout.split() == [f"rxe_{LAB}_{node}"] * 2, result


def test_rc_pingpong(handle: LabHandle) -> None:
    record = passed_run(LAB, "pingpong", "--transport", "rc", "--iters", "100", "--size", "1024")
    assert record["figures"]["iters"] == 100


def test_rping_through_rdma_cm(handle: LabHandle) -> None:
    passed_run(LAB, "rping")


def vm_captures() -> str:
    """Capture processes in the Docker host VM (vmcapture.py names itself in its argv)."""
    found = DockerHostVM().run(["sh", "-c", "ps -eo pid,args | grep '[l]abctl-vmcapture'"],
                               timeout=60)
    return found.stdout.strip()


def test_capture_in_the_vm_matches_the_programs_and_leaves_nothing(handle: LabHandle,
                                                                    tmp_path: Path) -> None:
    """Two captures at once on a docker lab: the run's own (`--capture`, node1's veth) and
    an interrupted `labctl capture` of node2's veth; both are streamed from the VM."""
    live = tmp_path / "live.pcap"
    proc = subprocess.Popen([sys.executable, "-m", "labctl", "capture", "node2:eth1", "-w",
                             str(live), "--filter", "udp port 4791", "--lab", LAB],
                            cwd=REPO, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        assert proc.stderr is not None
        started = proc.stderr.readline()
        assert "(v2-eth1 in labctl-" in started and "Docker host VM" in started, (
            started + proc.stderr.read())
        assert vm_captures()
        result = labctl("run", "pingpong", "--lab", LAB, "--transport", "rc", "--iters", "3",
                        "--size", "64", "--capture-dir", str(tmp_path), "--json", timeout=300)
        record = only_record(result.stdout)
        assert record["status"] == "passed", result.stdout + result.stderr
        assert (record["capture"]["node"], record["capture"]["interface"]) == ("node1", "eth1")
        assert_pingpong_on_the_wire(record, 3)
        proc.send_signal(signal.SIGINT)
        err = proc.stderr.read()
        assert proc.wait(60) == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
    assert re.search(r"\d+ packets written", err), err
    ops = {op for f in decode_file(live) for op in f.ops}
    assert {"RC_SEND_ONLY", "RC_ACKNOWLEDGE"} <= ops and all(
        f.proto == "RoCEv2" for f in decode_file(live))  # the filter ran in the VM
    deadline = time.monotonic() + 60  # labctl waited for its ssh; allow the VM a moment
    while vm_captures() and time.monotonic() < deadline:
        time.sleep(1)
    assert vm_captures() == ""
    local = subprocess.run(["pgrep", "-af", f"labctl capture node2:eth1 .*--lab {LAB}"],
                           capture_output=True, text=True, check=False)
    assert local.stdout == ""


def test_inspector_matches_ibv_devinfo_in_a_container(handle: LabHandle) -> None:
    for node in NODES:
        for args in ([], ["-v"]):
            c = handle.run(node, ["ibv_devinfo", *args], timeout=120)
            py = handle.run(node, handle.node_python("labctl.verbs", "devinfo", *args),
                            timeout=180)
            assert c.returncode == py.returncode == 0, (c.stderr, py.stderr)
            assert py.stdout == c.stdout
            assert f"rxe_{LAB}_{node}" in c.stdout
            # the node command: the image's compiled client, as in qemu nodes
            client = handle.run(node, ["labctl-devinfo", *args], timeout=180)
            assert (client.returncode, client.stdout) == (0, c.stdout), client.stderr
    path = handle.run(NODES[0], ["readlink", "-f", "/usr/local/bin/labctl-devinfo"], timeout=60)
    assert path.stdout.strip() == "/usr/local/lib/labctl/labctl-verbs-client", path


def _port_state(handle: LabHandle, node: str) -> str:
    device = f"/sys/class/infiniband/rxe_{LAB}_{node}/ports/1/state"
    return handle.run(node, ["cat", device], timeout=60).stdout.strip()


def _wait_port(handle: LabHandle, node: str, want: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while want not in _port_state(handle, node):
        assert time.monotonic() < deadline, f"{node}: port not {want}: {_port_state(handle, node)}"
        time.sleep(0.5)


def test_link_set_pulls_and_plugs_a_container_nodes_cable(handle: LabHandle) -> None:
    """Parity with qemu nodes: the node's carrier goes, its rxe port goes DOWN, and back."""
    try:
        labctl("link", "set", "--lab", LAB, "node1:eth1", "down", check=True)
        _wait_port(handle, "node1", "DOWN")
        carrier = handle.run("node1", ["cat", "/sys/class/net/eth1/carrier"], timeout=60)
        assert carrier.stdout.strip() == "0"
        labctl("link", "set", "--lab", LAB, "node1:eth1", "up", check=True)
        _wait_port(handle, "node1", "ACTIVE")
        delay = labctl("link", "set", "--lab", LAB, "node1:eth1", "--delay", "5ms")
        if delay.returncode == 0:  # netem needs sch_netem in the engine's kernel
            qdisc = handle.run("node1", ["tc", "qdisc", "show", "dev", "eth1"], timeout=60)
            assert "netem" in qdisc.stdout and "delay 5ms" in qdisc.stdout
            labctl("link", "set", "--lab", LAB, "node1:eth1", "--clear", check=True)
        else:
            assert "tc in node1 failed" in delay.stderr, delay.stderr
    finally:  # the cable back in, whatever failed: the other tests need the link
        labctl("link", "set", "--lab", LAB, "node1:eth1", "up", timeout=120)
        _wait_port(handle, "node1", "ACTIVE")


def test_a_stopped_container_is_repaired_by_up(handle: LabHandle,
                                               docker_topology: Path) -> None:
    client = engine().client()
    try:
        client.containers.get(f"labctl-{LAB}-node2").stop(timeout=1)
    finally:
        client.close()
    repaired_by_up = False
    try:
        status = labctl("status", "--lab", LAB, "--json")
        assert status.returncode == 1
        states = {n["name"]: n["state"] for n in json.loads(status.stdout)["labs"][0]["nodes"]}
        assert states == {"node1": "running", "node2": "stopped"}
        repaired = labctl("up", str(docker_topology), timeout=600)
        assert repaired.returncode == 0, repaired.stderr
        repaired_by_up = True
        assert "restarted node2" in repaired.stdout
    finally:  # repaired whatever failed above: the other tests need node2 (a status of a
        # docker lab costs seconds under TCG: only asked when the repair did not succeed)
        if not repaired_by_up and labctl("status", "--lab", LAB, "--json",
                                         timeout=120).returncode != 0:
            labctl("up", str(docker_topology), timeout=600, check=True)
    _wait_port(handle, "node2", "ACTIVE")
    result = labctl("run", "pingpong", "--lab", LAB, "--iters", "50", "--json", timeout=300)
    assert result.returncode == 0, result.stderr


def test_host_folders_both_ways(handle: LabHandle, folders: dict[str, Path]) -> None:
    """Through the Docker host VM: a file written on the host is read in the container,
    one written in the container is read on the host, and `:ro` refuses writes (one
    `docker exec`: each costs seconds under TCG)."""
    script = ("cat /mnt/rw/from-host.txt /mnt/ro/from-host.txt; "
              "echo node1 > /mnt/rw/from-node1.txt || echo 'rw write failed'; "
              "echo no > /mnt/ro/x.txt && echo 'ro write passed'; true")
    result = handle.run("node1", ["sh", "-c", script], timeout=120)
    assert result.stdout == "host rw\nhost ro\n", result.stdout + result.stderr
    assert "Read-only file system" in result.stderr
    assert (folders["rw"] / "from-node1.txt").read_text() == "node1\n"
    assert not (folders["ro"] / "x.txt").exists()


def test_doctor_tells_the_truth_about_this_host(handle: LabHandle) -> None:
    """With the lab up (so the Docker host VM runs): the host's own rxe as this host has it
    (loaded, or loadable), and the VM's per-netns rxe working."""
    result = labctl("doctor", "--json", check=True, timeout=300)
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    # as doctor asks: loaded, else loadable by modprobe (none on PATH: not loadable)
    loadable = shutil.which("modprobe") is not None and subprocess.run(
        ["modprobe", "-n", "rdma_rxe"], capture_output=True, check=False).returncode == 0
    rxe_here = Path("/sys/module/rdma_rxe").is_dir() or loadable
    host = checks["host kernel RDMA"]
    assert host["result"] == ("ok" if rxe_here else "no"), host
    assert host["result"] == "ok" or "Docker host VM" in host["todo"], host
    assert DockerHostVM().running()
    assert checks["Docker host VM"]["result"] == "ok", checks["Docker host VM"]
    assert checks["per-netns rxe (VM)"]["result"] == "ok", checks["per-netns rxe (VM)"]
