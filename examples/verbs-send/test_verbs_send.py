"""rc_send built and run in a lab, from pytest, with labctl's plugin (docs/workbench.md).

    pytest examples/verbs-send            # as root: boots verbs-send.yaml's lab, removes it
    pytest examples/verbs-send --rdma-lab-keep    # leave it up; the next run reuses it

The lab mounts this directory read-only in both nodes; each node builds the program into
its own /tmp with make, then rc_send runs as server in one node and client in the other.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from labctl.pytest_plugin import RdmaLab

HERE = Path(__file__).resolve().parent
SRC = "/mnt/verbs-send"  # the topology's mount
BUILD = "/tmp/verbs-send"
PORT = 18515
BYTES = 65536
SERVER = f"-s -d {{device}} -g {{gid_index}} -p {{port}} -n {BYTES}"
CLIENT = f"-c {{server_ip}} -d {{device}} -g {{gid_index}} -p {{port}} -n {BYTES}"


pytestmark = pytest.mark.rdma_lab(topology="verbs-send.yaml")


@pytest.fixture(scope="module")
def rc_send(rdma_lab: RdmaLab) -> str:
    """rc_send built in every node (make, pkg-config libibverbs); its path there."""
    for node in rdma_lab.nodes:
        built = rdma_lab.host(node).run(f"make -C {SRC} O={BUILD}")
        assert built.rc == 0, f"make in {node}:\n{built.stdout}{built.stderr}"
    return f"{BUILD}/rc_send"


def test_the_nodes_have_the_mount_and_the_toolchain(rdma_lab: RdmaLab) -> None:
    host = rdma_lab.host("node1")
    assert host.file(f"{SRC}/rc_send.c").contains("RC SEND")
    assert host.package("libibverbs-dev").is_installed
    assert host.check_output("pkg-config --modversion libibverbs")
    # read-only: the node cannot write into the user's tree
    assert host.run(f"touch {SRC}/written-by-node").rc != 0


def test_c_server_and_client(rdma_lab: RdmaLab, rc_send: str) -> None:
    record = rdma_lab.run_pair(f"{rc_send} {SERVER}", f"{rc_send} {CLIENT}",
                               ready_port=PORT, timeout=90)
    assert record.status == "passed", record.to_dict()
    assert f"received {BYTES} bytes ok" in record.server_output
    assert f"sent {BYTES} bytes ok" in record.client_output
    assert record.server == "node1" and record.client == "node2"


def test_pyverbs_server_and_c_client(rdma_lab: RdmaLab, rc_send: str) -> None:
    """The Python variant speaks the same protocol: either side may be either program."""
    record = rdma_lab.run_pair(f"python3 {SRC}/rc_send.py {SERVER}", f"{rc_send} {CLIENT}",
                               ready_port=PORT, timeout=120)
    assert record.status == "passed", record.to_dict()
    assert f"received {BYTES} bytes ok" in record.server_output
    assert f"sent {BYTES} bytes ok" in record.client_output
