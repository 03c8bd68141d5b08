"""qperf and libfabric's fi_pingpong in the workloads lab: RDMA beside TCP on an rxe pair
and a siw pair, figures parsed; what a device cannot run is reported or refused."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import labctl, only_record, passed_run
from tests.integration.modulelab import ModuleLab

pytestmark = pytest.mark.integration


def rows(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["test"]: row for row in record["figures"]["rows"]}


def test_qperf_rdma_and_tcp_on_rxe(workloads_lab: ModuleLab) -> None:
    record = passed_run(workloads_lab.name, "qperf", "--server", "rxe1", "--client", "rxe2",
                        "--duration", "2")
    by_test = rows(record)
    for test in ("rc_lat", "tcp_lat"):
        assert by_test[test]["status"] == "passed" and by_test[test]["latency_us"] > 0
    for test in ("rc_bw", "tcp_bw"):
        assert by_test[test]["status"] == "passed" and by_test[test]["bw_mb_per_s"] > 0
    assert by_test["ud_lat"]["status"] == "unsupported"
    assert "GRH" in by_test["ud_lat"]["reason"]
    figures = record["figures"]
    assert figures["rdma_latency_us"] == by_test["rc_lat"]["latency_us"]
    assert figures["tcp_bw_mb_per_s"] == by_test["tcp_bw"]["bw_mb_per_s"]


def test_qperf_on_siw_reports_what_iwarp_cannot_and_refuses_ud_only(
        workloads_lab: ModuleLab) -> None:
    record = passed_run(workloads_lab.name, "qperf", "--server", "siw1", "--client", "siw2",
                        "--duration", "2", "--tests", "rc_lat,rc_bi_bw,ud_lat,tcp_lat")
    by_test = rows(record)
    assert by_test["rc_lat"]["latency_us"] > 0
    assert by_test["rc_bi_bw"]["bw_mb_per_s"] > 0
    assert by_test["tcp_lat"]["latency_us"] > 0
    assert by_test["ud_lat"]["status"] == "unsupported"
    assert "RC only" in by_test["ud_lat"]["reason"]
    refused = labctl("run", "qperf", "--lab", workloads_lab.name, "--server", "siw1",
                     "--client", "siw2", "--tests", "ud_lat", "--json", timeout=120)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert only_record(refused.stdout)["status"] == "skipped"
    assert "refused: qperf rdma-tcp between siw1 and siw2: ud_lat: iWARP (siw) has RC " \
           "only" in " ".join(refused.stderr.split())


@pytest.mark.parametrize(("server", "client"), [("rxe1", "rxe2"), ("siw1", "siw2")])
def test_fabric_verbs_and_tcp_side_by_side(workloads_lab: ModuleLab, server: str,
                                           client: str) -> None:
    record = passed_run(workloads_lab.name, "fabric", "--server", server, "--client", client,
                        "--size", "1024", "--iters", "20")
    by_test = rows(record)
    assert list(by_test) == ["verbs-msg", "verbs-rdm", "tcp-msg", "tcp-rdm"]
    for row in by_test.values():
        assert row["status"] == "passed", row
        assert (row["size"], row["iterations"]) == (1024, 20)
        assert row["latency_us"] > 0 and row["bw_mb_per_s"] > 0
    assert record["figures"]["rdma_latency_us"] > 0
    assert record["figures"]["tcp_latency_us"] > 0
