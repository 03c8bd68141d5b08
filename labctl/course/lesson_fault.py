"""A lesson's fault (lesson.yaml's `fault:`) on the wire for one run of the learner's
programs: put on after the build, taken off when the run ends however it ends (a failed
run, a LabctlError, Ctrl-C), with the packets it acted on read before it goes. The fault is
a `labctl fault` like any other (rdmafault/apply.py), so `labctl fault list` shows it while
the run goes on and `labctl down` removes it with the nodes whatever happened."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from labctl.course.catalog import LessonFault
from labctl.errors import LabctlError
from labctl.lab.handle import LabHandle
from labctl.rdmafault.apply import add_fault, clear_faults, fault_counts, load_faults
from labctl.rdmafault.fault_spec import FaultSpec, build_spec


def fault_spec(fault: LessonFault) -> FaultSpec:
    """The `labctl fault add` spec of a lesson's fault (UsageError for a bad one: the unit
    tests build every shipped lesson's)."""
    return build_spec(fault.action, opcodes=list(fault.opcodes), qp=None, psn=None,
                      tcp=False, tcp_port=None, nth=fault.nth, every=fault.every,
                      count=fault.count, skip=fault.skip, probability=None, delay=None)


@dataclass
class FaultSeen:
    """What the fault did over the run: filled in when the run ends."""

    description: str  # `drop write count=12`
    node: str
    hit: int | None = None  # packets it acted on; None: its node did not answer


def refuse_faults_of_its_own(handle: LabHandle) -> None:
    """A lab that already has faults cannot run a lesson with one: they would act on the
    learner's packets too, and the verdict would not be the lesson's. They are the user's
    (or an interrupted check's whose clean-up could not reach the node): kept, named."""
    if load_faults(handle):
        raise LabctlError(f"lab {handle.lab.name} has faults on it already",
                          hint=f"`labctl fault list --lab {handle.lab.name}` shows them; "
                          f"`labctl fault clear --lab {handle.lab.name}` takes them off")


@contextmanager
def lesson_fault(handle: LabHandle, fault: LessonFault | None,
                 nodes: dict[str, str]) -> Iterator[FaultSeen | None]:
    """`fault` on the RDMA link of its side's node (`nodes`: side -> node) while the block
    runs; nothing when the lesson has none. A lab that already has faults is refused."""
    if fault is None:
        yield None
        return
    refuse_faults_of_its_own(handle)
    node = nodes[fault.side]
    interface = handle.lab.node(node).rdma_interface
    if interface is None:
        raise LabctlError(f"{node} has no RDMA link for the lesson's fault",
                          hint="`labctl lesson start N DIR` brings up the lesson's lab")
    spec = fault_spec(fault)
    added = add_fault(handle, node, interface.name, spec)
    seen = FaultSeen(spec.describe(), node)
    try:
        yield seen
        counts = fault_counts(handle, [added])[added.id]
        seen.hit = None if counts is None else counts[1]
    finally:
        clear_faults(handle, fault_id=added.id)
