"""UCX and Open MPI live in the workloads lab (rxe1..rxe3 rxe, siw1 siw2 siw): ucx_perftest
over rc_verbs and tcp, UCX's refusal on siw, what ucx_info sees, and MPI across the three
rxe nodes over UCX and TCP. Small iterations: TCG."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import labctl, run_records
from tests.integration.modulelab import ModuleLab
from tests.integration.workloads.conftest import WORKLOADS_LAB

pytestmark = pytest.mark.integration


def test_ucx_tag_latency_over_rc_verbs_and_tcp_in_one_run(workloads_lab: ModuleLab) -> None:
    result = labctl("run", "ucx", "--lab", WORKLOADS_LAB, "--server", "rxe1", "--client",
                    "rxe2", "--test", "tag_lat", "--iters", "50", "--json", timeout=900)
    assert result.returncode == 0, result.stderr
    records = run_records(result.stdout)
    by_variant = {r["variant"]: r for r in records}
    assert list(by_variant) == ["tag_lat-rdma", "tag_lat-tcp"]
    for variant, lane in (("tag_lat-rdma", "rc_verbs/rxe0:1"), ("tag_lat-tcp", "tcp/eth1")):
        figures = by_variant[variant]["figures"]
        assert by_variant[variant]["status"] == "passed"
        assert figures["iterations"] == 50
        assert figures["time_kind"] == "latency"
        assert 0 < figures["usec_percentile"] < 1e6
        assert figures["lanes"] == [lane]  # UCX_PROTO_INFO: the transport messages took


def test_ucx_over_rdma_is_refused_on_siw_in_ucx_own_words(workloads_lab: ModuleLab) -> None:
    result = labctl("run", "ucx", "--lab", WORKLOADS_LAB, "--server", "siw1", "--client",
                    "siw2", timeout=300)
    assert result.returncode == 2
    assert "refused:" in result.stderr
    assert "device uverbs0 of type iWARP is not supported" in " ".join(result.stderr.split())
    info = labctl("run", "ucx-info", "--lab", WORKLOADS_LAB, "--nodes", "siw1,rxe1", "--json",
                  timeout=300)
    assert info.returncode == 0, info.stderr
    siw1, rxe1 = json.loads(info.stdout)["nodes"]
    assert siw1["rdma_transports"] == []
    assert siw1["ucx_says"] == ["device uverbs0 of type iWARP is not supported"]
    assert "tcp/eth1" in siw1["transports"]
    assert rxe1["rdma_transports"] == ["rc_verbs/rxe0:1", "ud_verbs/rxe0:1"]


def test_mpi_across_three_rxe_nodes_over_ucx_and_tcp(workloads_lab: ModuleLab) -> None:
    result = labctl("run", "mpi", "--lab", WORKLOADS_LAB, "--iters", "20", "--size", "64",
                    "--timeout", "400", "--json", timeout=1200)
    assert result.returncode == 0, result.stderr + result.stdout[-4000:]
    report = json.loads(result.stdout)
    assert report["nodes"] == ["rxe1", "rxe2", "rxe3"]
    assert report["hostfile"] == "10.77.1.1 slots=1\n10.77.1.2 slots=1\n10.77.1.3 slots=1\n"
    assert [r["transport"] for r in report["runs"]] == ["ucx", "tcp"]
    for run in report["runs"]:
        figures = run["figures"]
        assert run["status"] == "passed", run["output"][-2000:]
        assert run["leftover"] == ""  # no prted nor rank left in any node
        assert [row["size"] for row in figures["pingpong"]] == [8, 16, 32, 64]
        assert all(row["samples"] == 20 and row["usec"] > 0 for row in figures["pingpong"])
        allreduce = figures["allreduce"]
        assert (allreduce["ranks"], allreduce["sum"], allreduce["wrong"]) == (3, 6, 0)
        assert allreduce["correct"] is True
    # Nothing listens on the data addresses after the run (the lab's sshd is stopped).
    for node, address in (("rxe1", "10.77.1.1"), ("rxe3", "10.77.1.3")):
        listening = labctl("exec", "--lab", WORKLOADS_LAB, node, "--", "ss", "-Hltn",
                           f"src {address}", timeout=120)
        assert listening.returncode == 0 and listening.stdout.strip() == ""
