"""NVMe over Fabrics and NFS over RDMA, live in the workloads lab (rxe1..rxe3 rxe, siw1
siw2 siw): each run writes a random pattern, reads it back with O_DIRECT and compares the
SHA-256 sums in the client node; the tests assert the bytes were verified and that the
traffic went where the transport says (rxe's packet counters move for RDMA, not for TCP).
Small sizes: TCG moves a few MB/s over rxe.
"""

from __future__ import annotations

from typing import Any

import pytest

from labctl.runners.execute import RunResult, endpoint, failure_details
from labctl.runners.nvmeof import NQN_PREFIX
from labctl.runners.spec import RunContext
from labctl.runners.storage import WORKLOADS, run_storage
from tests.integration.conftest import labctl, run_records
from tests.integration.modulelab import ModuleLab

pytestmark = pytest.mark.integration

MIB = 4
SMALL = {"size_mib": MIB, "timeout": 240.0}


def explain(result: RunResult) -> str:
    return f"{result.label}: {result.status} ({result.reason})\n{failure_details(result)}"


def assert_verified(result: RunResult) -> None:
    assert result.status == "passed", explain(result)
    figures = result.figures
    assert figures["verified"] is True, explain(result)
    assert figures["write_bytes"] == figures["read_bytes"] == MIB * 1048576
    assert figures["write_mb_s"] > 0 and figures["read_mb_s"] > 0


def rxe_packets(record: dict[str, Any], node: str) -> int:
    node_counters = (record["counters"] or {}).get(node) or {}
    return int(node_counters.get("rxe0/1", {}).get("sent_pkts", 0))


def test_nvmeof_over_rdma_and_tcp_on_rxe(workloads_lab: ModuleLab) -> None:
    """The CLI's path: one command, both transports, one record each."""
    done = labctl("run", "nvmeof", "--lab", workloads_lab.name, "--server", "rxe1",
                  "--client", "rxe2", "--size-mib", str(MIB), "--json", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    records = run_records(done.stdout)
    assert [r["variant"] for r in records] == ["rdma", "tcp"]
    for record in records:
        assert record["status"] == "passed" and record["figures"]["verified"] is True, record
        assert record["figures"]["write_bytes"] == MIB * 1048576
        assert record["figures"]["target"].startswith("/dev/nvme")
    rdma, tcp = records
    # MIB MiB each way over RoCE: at least one packet per KiB (the path MTU is 1024)
    assert rxe_packets(rdma, "rxe2") > MIB * 1024, rdma["counters"]
    assert rxe_packets(tcp, "rxe2") == 0, tcp["counters"]
    assert "rdma_cms:    rdma-cm" in rdma["client_output"]


def test_nvmeof_over_rdma_on_siw(workloads_lab: ModuleLab) -> None:
    result = run_storage(workloads_lab.handle, WORKLOADS[("nvmeof", "rdma")], "siw1", "siw2",
                         SMALL)
    assert_verified(result)
    assert "labctl: discovered nqn.2014-08.org.rdma-lab:labctl.siw1.rdma" in \
        result.client_output


@pytest.mark.parametrize(("transport", "server", "client"), [
    ("rdma", "rxe3", "rxe1"), ("rdma", "siw2", "siw1"), ("tcp", "rxe2", "rxe3")])
def test_nfs(workloads_lab: ModuleLab, transport: str, server: str, client: str) -> None:
    result = run_storage(workloads_lab.handle, WORKLOADS[("nfs", transport)], server, client,
                         SMALL)
    assert_verified(result)
    assert f"proto={transport}," in result.client_output, explain(result)
    if transport == "rdma":
        assert "portlist: rdma 20049" in result.server_output


def test_a_previous_run_s_target_and_connection_are_removed_first(
        workloads_lab: ModuleLab) -> None:
    """What a run killed midway leaves (a target on the server, a connection on the
    client) is removed by the next run before it starts, and the next run passes."""
    handle = workloads_lab.handle
    workload = WORKLOADS[("nvmeof", "tcp")]
    ctx = RunContext(endpoint(handle, "rxe3"), endpoint(handle, "rxe2"), SMALL)
    setup = handle.run("rxe3", workload.spec.server_argv(ctx), timeout=120)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    nqn = f"{NQN_PREFIX}rxe3.tcp"
    connect = handle.run("rxe2", ["sh", "-c", 'modprobe nvme-tcp && nvme connect -t tcp '
                                  '-a "$1" -s 4420 -n "$2"', "sh", ctx.server.address, nqn],
                         timeout=120)
    assert connect.returncode == 0, connect.stdout + connect.stderr
    result = run_storage(handle, workload, "rxe3", "rxe2", SMALL)
    assert_verified(result)
    assert result.client_output.startswith(f"labctl: disconnected {nqn}\n"), explain(result)
    assert f"labctl: removed subsystem {nqn}" in result.server_output.split("labctl: target")[0]
    left = handle.run("rxe2", ["sh", "-c", "cat /sys/class/nvme/*/subsysnqn 2>/dev/null; true"],
                      timeout=60)
    assert NQN_PREFIX not in left.stdout, left.stdout
