"""rdma-core's own pyverbs test suite in a node (`labctl run rdma-core-tests`): where the
image keeps it, which of its modules are generic (not for one vendor's hardware), and the
failures known on the software devices, each with its reason.

A known failure is shown as known in every report, never filtered out: a run fails only on
a failure this table does not name, and a known failure that passes is reported as such
(the table is then out of date).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Where the image's customize hook (labctl/images/hooks/rdma-core-tests.sh) unpacks the
# suite: DIR/tests/run_tests.py, and DIR/VERSION the rdma-core version it came from.
TESTS_DIR = "/usr/share/rdma-core-tests"

# The modules that test the verbs API itself, on any device (design.md section 7). The
# others are vendor modules (mlx5, efa, hns, bnxt_re, mana...), which skip or fail off their
# hardware, and running them all at once segfaults in an mlx5 module: hence one run each.
GENERIC_MODULES: tuple[str, ...] = (
    "test_addr", "test_atomic", "test_cq", "test_cq_events", "test_cqex", "test_device",
    "test_flow", "test_fork", "test_mr", "test_odp", "test_parent_domain", "test_pd",
    "test_qp", "test_qpex", "test_rdmacm", "test_relaxed_ordering", "test_rss_traffic",
    "test_shared_pd", "test_srq", "test_tag_matching",
)

KnownOutcome = Literal["crashed", "failed", "errored"]
DeviceKind = Literal["rxe", "siw"]


@dataclass(frozen=True)
class KnownFailure:
    """A failure seen on a software device, with why it is not the lab's fault."""

    module: str  # "test_parent_domain"
    test: str  # "Class.test_name" as unittest names it; "" for the module's run as a whole
    devices: tuple[DeviceKind, ...]
    outcome: KnownOutcome  # crashed: the run ended by a signal (test "")
    reason: str

    def matches(self, module: str, test: str, device: str, outcome: str) -> bool:
        return (self.module, self.test, self.outcome) == (module, test, outcome) \
            and device in self.devices


KNOWN_FAILURES: tuple[KnownFailure, ...] = (
    KnownFailure(
        "test_parent_domain", "", ("rxe",), "crashed",
        "segfault at interpreter exit after every test ran (all skipped: 'Parent Domain is "
        "not supported on this device'): pyverbs' PD dealloc fails with EBADF ('Failed to "
        "dealloc PD. Errno: 9') as the module's objects are freed, then python segfaults "
        "(rdma-core 56.1; on siw the module's tests skip before any PD is made)"),
    KnownFailure(
        "test_flow", "", ("rxe",), "crashed",
        "segfault at interpreter exit after every test ran (all skipped: 'Create QP type 8 "
        "is not supported', rxe has no raw packet QP): pyverbs' CQ close fails with EBADF "
        "('Failed to close CQ. Errno: 9') as the module's objects are freed, then python "
        "segfaults (rdma-core 56.1, 3 runs of 3 on cold-booted nodes, not every run: it passed "
        "once on a restored node in CI; on siw the tests skip earlier)"),
    KnownFailure(
        "test_cq", "CQTest.test_resize_cq", ("rxe",), "errored",
        "'Got timeout on polling (1 CQEs remaining)': the test posts 6 UD sends, then resizes "
        "the CQ to 1 and expects EINVAL because 6 completions are unpolled; rxe compares the "
        "new size with the completions present at that moment (rxe_cq_chk_attr), and under "
        "TCG its kernel worker has not completed the sends yet, so the resize succeeds and a "
        "later completion overruns the small CQ and is lost (2 of 5 runs at load 7-14, 3 of 3 "
        "at load 4, 2026-11-26; on siw the test passes)"),
)


@dataclass(frozen=True)
class KnownRace:
    """A test failure that comes from the host's speed, not from the device: a module that
    failed only by races like this is run once more (the report says so)."""

    text: str  # in the last line of the failed test's traceback
    reason: str


KNOWN_RACES: tuple[KnownRace, ...] = (
    KnownRace(
        "Got timeout on polling",
        "the suite polls a CQ for at most POLL_CQ_TIMEOUT (10 s, tests/utils.py); rxe "
        "completes work in a kernel worker, which under TCG on a loaded host (load 7-14 on "
        "2 cores) took longer: test_cq's test_resize_cq, in 2 of 5 runs of test_cq on rxe"),
)


def known_race(failure_reason: str) -> KnownRace | None:
    """The race a failed test's last traceback line names, None if it names none."""
    return next((r for r in KNOWN_RACES if r.text in failure_reason), None)


def known_failure(module: str, test: str, device: str, outcome: str) -> KnownFailure | None:
    """The table's entry for this outcome on this device kind, None if it is not known."""
    return next((k for k in KNOWN_FAILURES if k.matches(module, test, device, outcome)), None)
