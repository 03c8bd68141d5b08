"""A docker lab across two Docker engines: two named Docker host VMs joined by labctl's
hosts network, and topologies/three-node-switch.yaml spread over them (node1 and node3 on
h1, node2 on h2, round-robin), its switch (MTU 9000) a Docker Swarm overlay network.

Under a lab name of its own: status shows each node's host and rxe's active MTU 4096 (the
overlay carries 9000-byte frames: VXLAN's 50 bytes fit in the hosts network's 9100), RC
pingpong passes between every pair (two across the hosts, one inside h1) with 4 KiB
packets, rping (RDMA CM) passes across the hosts, the swarm's join token stays in the lab
directory (0600), and `down` leaves nothing on either host (containers, networks, swarm
membership, docker_gwbridge: the module lab's finalizer, modulelab). VMs this module
started are stopped at the end; a developer's running ones are left alone. Names:
LABCTL_SWARM_TEST_LAB (lab), LABCTL_SWARM_TEST_VMS (two VM names, comma-separated).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from labctl.dockerhost.sdk import sdk
from labctl.dockerhost.vm import DockerHostVM
from labctl.errors import LabctlError
from labctl.store.labdir import LabDir
from labctl.vm.machine import check_qemu_host
from tests.integration.conftest import labctl, make_topology, passed_run, run_records
from tests.integration.leftovers import docker_leftovers
from tests.integration.modulelab import ModuleLab, module_lab

pytestmark = pytest.mark.integration

LAB = os.environ.get("LABCTL_SWARM_TEST_LAB", "mhtest")
VMS = tuple(os.environ.get("LABCTL_SWARM_TEST_VMS", "mh1,mh2").split(","))


def _qemu_missing() -> str:
    try:
        check_qemu_host()
    except LabctlError as exc:
        return exc.message
    return ""


@pytest.fixture(scope="module")
def swarm_vms() -> Iterator[list[DockerHostVM]]:
    """The two Docker host VMs, which `labctl up` boots (in parallel) when they are not
    running: stopped after the lab only if this module started them."""
    missing = _qemu_missing()
    if missing:
        pytest.skip(f"this machine cannot run the Docker host VMs (qemu): {missing}")
    vms = [DockerHostVM(n) for n in VMS]
    started = [vm.name for vm in vms if not vm.running()]
    yield vms
    # both at once: each stops its engine, syncs and unmounts its data disk first
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda name: labctl("docker-host", "down", "--name", name, "--force",
                                          check=True), started))


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_topology(tmp_path_factory.mktemp("multihost"), "three-node-switch.yaml",
                         LAB, provider="docker",
                         hosts={"h1": f"vm:{VMS[0]}", "h2": f"vm:{VMS[1]}"})


multihost_lab = module_lab(LAB, timeout=1200, up_args=lambda topology: ["--timeout", "900"],
                           requires=("swarm_vms",),
                           leftovers=lambda name: docker_leftovers(name, VMS),
                           down_says=("swarm membership",))


def _client(vm: str) -> Any:
    return sdk().DockerClient(base_url=DockerHostVM(vm).base_url, timeout=60)


def test_status_shows_each_nodes_host(multihost_lab: ModuleLab) -> None:
    result = labctl("status", "--lab", LAB, "--json", check=True)
    (status,) = json.loads(result.stdout)["labs"]
    hosts = {n["name"]: n["details"]["host"] for n in status["nodes"]}
    assert hosts == {"node1": "h1", "node2": "h2", "node3": "h1"}
    assert {n["state"] for n in status["nodes"]} == {"running"}
    # JSON keeps the inspector's strings
    assert {d["active_mtu"] for n in status["nodes"] for d in n["devices"]} == {"4096"}
    table = labctl("status", "--lab", LAB, check=True).stdout
    assert "host" in table and "h1" in table and "h2" in table


def test_each_node_runs_on_its_own_engine(multihost_lab: ModuleLab) -> None:
    for vm, nodes in ((VMS[0], ("node1", "node3")), (VMS[1], ("node2",))):
        client = _client(vm)
        try:
            names = sorted(c.name for c in client.containers.list(
                filters={"label": f"labctl.lab={LAB}"}))
            assert names == [f"labctl-{LAB}-{node}" for node in nodes]
            assert client.info()["Swarm"]["LocalNodeState"] == "active"
        finally:
            client.close()


def test_rc_pingpong_between_every_pair(multihost_lab: ModuleLab) -> None:
    result = labctl("run", "pingpong", "--transport", "rc", "--iters", "50", "--size", "8192",
                    "--mtu", "4096", "--pairs", "all", "--lab", LAB, "--json", check=True,
                    timeout=600)
    records = run_records(result.stdout)
    pairs = {(r["server"], r["client"]): r["status"] for r in records}
    assert pairs == {("node1", "node2"): "passed", ("node1", "node3"): "passed",
                     ("node2", "node3"): "passed"}, result.stdout


def test_rping_across_hosts(multihost_lab: ModuleLab) -> None:
    passed_run(LAB, "rping")


def test_join_token_is_private(multihost_lab: ModuleLab) -> None:
    labdir = LabDir(LAB)
    tokens = labdir.path / "swarm-tokens.json"
    assert tokens.stat().st_mode & 0o777 == 0o600
    token = json.loads(tokens.read_text())["worker"]
    assert token.startswith("SWMTKN-")
    for path in labdir.path.iterdir():
        if path != tokens and path.is_file():
            assert token not in path.read_text(errors="replace"), path
