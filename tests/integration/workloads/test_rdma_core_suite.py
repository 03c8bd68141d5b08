"""rdma-core's own pyverbs test suite in the workloads lab's rxe1 and siw1 (`labctl run
rdma-core-tests`): each module's results held against the known-failure table.

CI runs a subset: the whole generic set took 370 s on both nodes at once under TCG (a loaded
host), past what CI affords. The subset has a module that passes tests on both devices
(cq), the QP and RDMA CM modules (qp, rdmacm: traffic on rxe, skips on siw) and both
modules known to segfault at exit on rxe (flow, parent_domain), so the table is exercised
both ways: known on rxe, not expected on siw.
"""

from __future__ import annotations

import json

import pytest

from labctl.data.rdma_core_suite import known_failure
from tests.integration.conftest import labctl
from tests.integration.modulelab import ModuleLab

pytestmark = pytest.mark.integration

CI_MODULES = ("test_cq", "test_qp", "test_rdmacm", "test_flow", "test_parent_domain")
# Tests each module reports, whatever the device (rdma-core 56.1's tests/).
TEST_COUNTS = {"test_cq": 4, "test_qp": 26, "test_rdmacm": 10, "test_flow": 5,
               "test_parent_domain": 6}


def test_the_suite_on_rxe_and_siw_matches_the_known_failures(workloads_lab: ModuleLab) -> None:
    lab = workloads_lab.name
    result = labctl("run", "rdma-core-tests", "--lab", lab, "--node", "rxe1,siw1",
                    "--modules", ",".join(CI_MODULES), "--timeout", "300", "--json",
                    timeout=900)
    report = json.loads(result.stdout) if result.stdout.startswith("{") else {}
    new = [f"{r['node']} {r['module']}: {r['new_failures']} {r['output_tail'][-1500:]}"
           for r in report.get("modules", []) if r["new_failures"]]
    assert result.returncode == 0, "\n".join(new) or result.stdout[-3000:] + result.stderr[-3000:]
    assert report["rdma_core"] == {"rxe1": "56.1-1", "siw1": "56.1-1"}
    assert (report["status"], report["new_failures"]) == ("passed", 0)
    runs = {(r["node"], r["module"]): r for r in report["modules"]}
    assert sorted(runs) == sorted((n, m) for n in ("rxe1", "siw1") for m in CI_MODULES)
    # rxe's test_resize_cq loses a completion when the CQ is resized before rxe's worker
    # completed the sends (known, labctl/data/rdma_core_suite.py): most runs under TCG, not
    # all. Either way the report says which.
    resize = known_failure("test_cq", "CQTest.test_resize_cq", "rxe", "errored")
    assert resize is not None
    resize_seen = runs["rxe1", "test_cq"]["errored"] == 1
    crashes_not_seen: list[str] = []
    for (node, module), run in sorted(runs.items()):
        kind = "rxe" if node == "rxe1" else "siw"
        assert run["device_kind"] == kind
        assert run["ran"] == TEST_COUNTS[module], run
        assert run["passed"] + run["skipped"] + run["errored"] == run["ran"]
        expected = known_failure(module, "", kind, "crashed")
        if expected is not None and run["status"] == "passed":
            # the crash at exit follows a use after free in pyverbs' teardown: most runs,
            # not all (seen passing once on a restored node); the report says so
            crashes_not_seen.append(f"{module} on {node} ({kind})")
            assert (run["exit_code"], run["known"]) == (0, []), run
        elif expected is not None:
            assert (run["status"], run["signal"]) == ("crashed", "SIGSEGV"), run
            assert run["known"] == [{"test": "", "outcome": "crashed",
                                     "reason": expected.reason}]
        elif (node, module) == ("rxe1", "test_cq") and resize_seen:
            assert (run["status"], run["failed"]) == ("failed", 0), run
            assert run["known"] == [{"test": "CQTest.test_resize_cq", "outcome": "errored",
                                     "reason": resize.reason}]
        else:
            assert (run["status"], run["exit_code"], run["known"]) == ("passed", 0, [])
            assert run["failed"] == run["errored"] == 0, run
    # flow and parent_domain crash at exit on rxe; resize_cq when it lost its completion
    assert report["known_failures"] == 2 - len(crashes_not_seen) + resize_seen
    now_passing = crashes_not_seen + (
        [] if resize_seen else ["test_cq.CQTest.test_resize_cq on rxe1 (rxe)"])
    assert sorted(entry.split(": known")[0] for entry in report["now_passing"]) == \
        sorted(now_passing), report["now_passing"]
    # rxe runs traffic where siw skips: what each device can do, in figures
    assert runs["rxe1", "test_qp"]["passed"] >= 20
    assert runs["rxe1", "test_rdmacm"]["passed"] == 10
    assert runs["siw1", "test_rdmacm"]["skipped"] == 10
    assert runs["siw1", "test_cq"]["passed"] == 3
    assert runs["siw1", "test_qp"]["skip_reasons"]["Create UD QP with attrs is not "
                                                   "supported"] == 6  # iWARP: RC only


def test_a_module_the_nodes_suite_lacks_is_refused(workloads_lab: ModuleLab) -> None:
    result = labctl("run", "rdma-core-tests", "--lab", workloads_lab.name, "--node", "rxe1",
                    "--modules", "cq,nosuch", timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "rdma-core 56.1-1's tests in rxe1 have no module test_nosuch" in result.stderr
    assert "test_cq" in result.stderr  # the hint lists what is there
