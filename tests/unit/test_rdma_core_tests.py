"""rdma-core's own test suite (`labctl run rdma-core-tests`): unittest's verbose output read
test by test, and each module's run held against the known failures.

The files under tests/unit/outputs/rdma-core-tests/ are real runs in the nodes of a
trixie-workloads lab (qemu TCG, kernel 7.3.4, rdma-core 56.1-1): `labctl exec NODE -- sh -c
'cd /usr/share/rdma-core-tests && python3 -u tests/run_tests.py --dev DEV -v MODULE 2>&1;
echo "labctl-exit=$?"'`, named MODULE.NODE.txt (rxe1: rxe0, siw1: siw0); test_pd.rxe1-nodev
with `--dev nosuch0` (every test errors), test_odp.rxe1-timeout under the runner's own
script with a 15 s timeout(1) (python ended mid-module, exit 124). test_cq.rxe1-polltimeout
is a `labctl run rdma-core-tests` run on a loaded host (load 14): the whole output as the
runner printed it (its output_tail, 23 lines) and the marker line the runner had cut.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from labctl.data.rdma_core_suite import GENERIC_MODULES, KNOWN_FAILURES
from labctl.errors import UsageError
from labctl.runners.rdma_core_tests import (
    ModuleRun,
    SuiteTarget,
    check_modules,
    now_passing,
    race_reasons,
    read_module_run,
    run_module,
    signal_name,
)
from labctl.runners.unittest_output import parse_unittest

OUTPUTS = Path(__file__).parent / "outputs" / "rdma-core-tests"
DEVICES = {"rxe1": ("rxe0", "rxe"), "siw1": ("siw0", "siw")}


def output(name: str) -> str:
    return (OUTPUTS / f"{name}.txt").read_text()


def module_run(name: str, kind: str | None = None) -> ModuleRun:
    """The module's run from its captured output (MODULE.NODE[-how]); `kind` overrides the
    node's device kind."""
    module, node = name.split(".")
    node = node.split("-")[0]
    device, node_kind = DEVICES[node]
    return read_module_run(node, device, kind or node_kind, module, output(name), 1.0)


# --- unittest's output -------------------------------------------------------------------
def test_each_test_with_its_status_and_a_docstring_line_between_name_and_status() -> None:
    parsed = parse_unittest(output("test_cq.siw1"))
    assert [(t.test, t.status) for t in parsed.tests] == [
        ("CQAPITest.test_create_cq", "passed"),
        ("CQAPITest.test_create_cq_bad_flow", "passed"),  # its docstring on the next line
        ("CQAPITest.test_create_cq_with_comp_channel", "passed"),
        ("CQTest.test_resize_cq", "skipped"),
    ]
    # the reason unquoted (unittest writes repr(): double quotes around a "can't")
    assert parsed.tests[3].reason == "No supported port is up, can't run traffic"
    assert (parsed.ran, parsed.verdict, parsed.counts) == (4, "OK", {"skipped": 1})
    assert parsed.seconds == pytest.approx(1.729)


def test_the_summary_and_tests_are_read_before_a_crash_at_exit() -> None:
    parsed = parse_unittest(output("test_parent_domain.rxe1"))
    assert (parsed.ran, parsed.verdict, parsed.counts) == (6, "OK", {"skipped": 6})
    assert parsed.count("skipped") == 6
    reasons = {t.reason for t in parsed.tests}
    assert reasons == {"Parent Domain is not supported on this device",
                       "There are no huge pages of size 2M allocated"}


def test_output_without_unittest_lines_gives_no_tests_and_no_summary() -> None:
    parsed = parse_unittest("Traceback (most recent call last):\nImportError: no pyverbs\n")
    assert (parsed.tests, parsed.ran, parsed.verdict) == ([], None, "")


# --- a module's run ----------------------------------------------------------------------
def test_a_clean_module_passes_with_its_counts_and_skip_reasons() -> None:
    run = module_run("test_cq.siw1")
    assert (run.status, run.exit_code, run.signal) == ("passed", 0, "")
    assert (run.ran, run.passed, run.failed, run.errored, run.skipped) == (4, 3, 0, 0, 1)
    assert run.skip_reasons == {"No supported port is up, can't run traffic": 1}
    assert run.known == [] and run.new_failures == [] and run.output_tail == ""


def test_the_parent_domain_segfault_on_rxe_is_a_known_crash_with_its_reason() -> None:
    run = module_run("test_parent_domain.rxe1")
    assert (run.status, run.exit_code, run.signal) == ("crashed", 139, "SIGSEGV")
    assert (run.ran, run.skipped) == (6, 6)
    assert [(k.test, k.outcome) for k in run.known] == [("", "crashed")]
    assert "Failed to dealloc PD" in run.known[0].reason
    assert run.new_failures == [] and run.ok
    assert run.output_tail.endswith("Segmentation fault")
    assert now_passing([run]) == []


def test_test_flow_segfaults_at_exit_on_rxe_too_and_is_known() -> None:
    run = module_run("test_flow.rxe1")
    assert (run.status, run.signal, run.ran, run.skipped) == ("crashed", "SIGSEGV", 5, 5)
    assert run.skip_reasons == {"Create QP type 8 is not supported": 5}
    assert [(k.test, k.outcome) for k in run.known] == [("", "crashed")]
    assert "Failed to close CQ" in run.known[0].reason and run.ok


def test_errored_tests_are_new_failures_with_their_tracebacks_last_line() -> None:
    run = module_run("test_pd.rxe1-nodev")
    assert (run.status, run.exit_code, run.ran, run.errored, run.passed) == \
        ("failed", 1, 4, 4, 0)
    assert [t.test for t in run.tests] == [
        "PDTest.test_alloc_pd", "PDTest.test_dealloc_pd", "PDTest.test_destroy_pd_twice",
        "PDTest.test_multiple_pd_creation"]
    last = "pyverbs.pyverbs_error.PyverbsRDMAError: Failed to find device nosuch0"
    assert {t.reason for t in run.tests} == {last}
    assert run.new_failures[0] == f"test_pd.PDTest.test_alloc_pd errored: {last}"
    assert len(run.new_failures) == 4 and run.known == []
    assert "FAILED (errors=4)" in run.output_tail


def test_a_module_past_its_timeout_keeps_the_tests_it_finished() -> None:
    run = module_run("test_odp.rxe1-timeout")
    assert (run.status, run.exit_code, run.ran) == ("timeout", 124, None)
    # the second test was under way: no status, so not counted at all
    assert [(t.test, t.status) for t in run.tests] == [
        ("OdpTestCase.test_odp_async_prefetch_rc_traffic", "skipped")]
    assert run.new_failures == ["test_odp timeout: ran into its timeout"]


def test_the_same_crash_on_a_device_kind_the_table_does_not_name_is_a_new_failure() -> None:
    run = module_run("test_parent_domain.rxe1", kind="siw")
    assert run.known == []
    assert run.new_failures == ["test_parent_domain crashed: ended by SIGSEGV"]
    assert not run.ok


def test_a_known_crash_that_did_not_happen_is_reported_as_now_passing() -> None:
    # siw1's clean run, read as if its node were rxe: the table expects the crash there
    run = module_run("test_parent_domain.siw1", kind="rxe")
    assert run.status == "passed" and run.known == [] and run.new_failures == []
    notes = now_passing([run])
    assert len(notes) == 1
    assert notes[0].startswith("test_parent_domain on siw1 (rxe): known failure now passes "
                               "(crashed: ")


def test_on_siw_parent_domain_passes_and_the_table_expects_nothing() -> None:
    run = module_run("test_parent_domain.siw1")
    assert (run.status, run.ran, run.skipped) == ("passed", 6, 6)
    assert now_passing([run]) == []


def test_no_exit_marker_means_the_node_did_not_finish_the_run() -> None:
    text = output("test_cq.siw1").split("labctl-exit=")[0]
    run = read_module_run("siw1", "siw0", "siw", "test_cq", text, 1.0)
    assert (run.exit_code, run.ran) == (None, 4)  # unittest's summary came, the status not
    assert run.status == "no-result"
    assert run.new_failures == ["test_cq no-result: the node did not report python's exit "
                                "status"]


@pytest.mark.parametrize(("code", "name"), [(139, "SIGSEGV"), (134, "SIGABRT"),
                                            (137, "SIGKILL"), (0, ""), (1, ""), (124, ""),
                                            (128, ""), (255, "")])
def test_signal_names_from_a_shell_exit_status(code: int, name: str) -> None:
    assert signal_name(code) == name


# --- a run that failed by a known race is run again ------------------------------------
# The captured race is test_resize_cq's poll timeout, which the table now names as a known
# failure on rxe: the race tests below take that entry out, so that what they test is the
# race mechanism on this real output, not the table.
RESIZE_CQ = ("test_cq", "CQTest.test_resize_cq")


@pytest.fixture
def resize_cq_not_known(monkeypatch: pytest.MonkeyPatch) -> None:
    from labctl.data import rdma_core_suite as table
    monkeypatch.setattr(table, "KNOWN_FAILURES", tuple(
        k for k in table.KNOWN_FAILURES if (k.module, k.test) != RESIZE_CQ))


def test_rxe_s_resize_cq_poll_timeout_is_a_known_failure() -> None:
    run = module_run("test_cq.rxe1-polltimeout")
    assert run.new_failures == []
    assert [(k.test, k.outcome) for k in run.known] == [("CQTest.test_resize_cq", "errored")]
    assert "rxe_cq_chk_attr" in run.known[0].reason


@pytest.mark.usefixtures("resize_cq_not_known")
def test_a_poll_timeout_under_load_is_a_known_race() -> None:
    run = module_run("test_cq.rxe1-polltimeout")
    assert (run.status, run.errored, run.passed) == ("failed", 1, 3)
    reasons = race_reasons(run)
    assert len(reasons) == 1
    assert reasons[0].startswith("test_cq.CQTest.test_resize_cq errored: pyverbs.pyverbs_error"
                                 ".PyverbsError: Got timeout on polling (1 CQEs remaining) "
                                 "(known race: the suite polls a CQ")


def test_other_failures_are_no_race() -> None:
    assert race_reasons(module_run("test_pd.rxe1-nodev")) == []
    assert race_reasons(module_run("test_parent_domain.rxe1")) == []  # a known crash
    assert race_reasons(module_run("test_cq.siw1")) == []


class ReplayedNode:
    """A lab handle whose node answers each run with the next captured output."""

    def __init__(self, *names: str) -> None:
        self.outputs = [output(name) for name in names]
        self.commands: list[list[str]] = []

    def run(self, node: str, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.commands.append(command)
        return subprocess.CompletedProcess(command, 0, self.outputs.pop(0), "")


TARGET = SuiteTarget("rxe1", "rxe0", "rxe", "56.1-1", frozenset({"test_cq", "test_pd"}))


@pytest.mark.usefixtures("resize_cq_not_known")
def test_a_module_that_failed_by_a_race_only_is_run_again_and_says_so() -> None:
    node = ReplayedNode("test_cq.rxe1-polltimeout", "test_cq.rxe1")
    run = run_module(node, TARGET, "test_cq", 60.0)  # type: ignore[arg-type]
    assert (run.status, run.attempts, run.passed, run.new_failures) == ("passed", 2, 4, [])
    assert len(run.retried) == 1
    assert run.retried[0].startswith("attempt 1: test_cq.CQTest.test_resize_cq errored: ")
    assert node.commands[0][-2:] == ["rxe0", "test_cq"] and len(node.commands) == 2


@pytest.mark.usefixtures("resize_cq_not_known")
def test_a_race_in_the_last_attempt_stays_a_failure() -> None:
    node = ReplayedNode("test_cq.rxe1-polltimeout", "test_cq.rxe1-polltimeout")
    run = run_module(node, TARGET, "test_cq", 60.0)  # type: ignore[arg-type]
    assert (run.status, run.attempts, len(run.retried)) == ("failed", 2, 1)
    assert run.new_failures[0].startswith("test_cq.CQTest.test_resize_cq errored")


def test_a_failure_that_is_no_race_is_not_run_again() -> None:
    node = ReplayedNode("test_pd.rxe1-nodev")
    run = run_module(node, TARGET, "test_pd", 60.0)  # type: ignore[arg-type]
    assert (run.status, run.attempts, run.retried, len(run.new_failures)) == \
        ("failed", 1, [], 4)


# --- the modules asked for and the table -------------------------------------------------
def test_modules_are_named_with_or_without_their_prefix_once_each() -> None:
    assert check_modules("cq, test_qp,cq") == ["test_cq", "test_qp"]
    assert check_modules(None) == list(GENERIC_MODULES)


@pytest.mark.parametrize("bad", ["", "cq;reboot", "../x", "CQ", "cq,", "a" * 80])
def test_a_module_name_that_cannot_be_one_is_refused(bad: str) -> None:
    with pytest.raises(UsageError) as refused:
        check_modules(bad)
    assert refused.value.exit_code == 2
    assert "is not a test module's name" in refused.value.message


def test_every_known_failure_names_a_generic_module_a_device_and_a_reason() -> None:
    assert KNOWN_FAILURES
    for entry in KNOWN_FAILURES:
        assert entry.module in GENERIC_MODULES
        assert entry.devices and set(entry.devices) <= {"rxe", "siw"}
        assert len(entry.reason) > 40
        assert entry.test == "" if entry.outcome == "crashed" else entry.test
