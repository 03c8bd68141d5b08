"""A lesson's verdict from what was seen outside the learner's programs: their exits and
output, the packets each side put on the wire, the devices' counter changes and the real
ibv_devinfo's values. Pure: the lab side (course/check.py) gathers an Observation, this
module only compares it with the lesson's declared checks."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from labctl.course.catalog import (
    ConnectCheck,
    CounterCheck,
    DevinfoCheck,
    DigestCheck,
    ExitCheck,
    FaultCheck,
    Lesson,
    OpcodesCheck,
    PrintsCheck,
    ResentCheck,
)
from labctl.course.shapes import FindingRecord

MESSAGE_BYTES = 4096  # what every pair lesson's client moves (rdma_common's default)
_DIGEST = re.compile(r"^buffer (\d+) bytes fnv1a64 ([0-9a-f]{16})$", re.MULTILINE)
_FIELD = re.compile(r"^\s*([a-z_]+):\s*(.*?)\s*$")
_NAK_ADVICE = {
    "remote access error": "a wrong rkey or address, or memory registered without the "
                           "remote access flag the operation needs",
    "RNR NAK": "the server had no receive posted when the message came: post the receive "
               "before the client sends",
    "invalid request": "the server's queue pair does not allow that operation (it was set up "
                       "without IBV_ACCESS_REMOTE_WRITE, _READ or _ATOMIC for it), or an "
                       "atomic's address is not 8-byte aligned",
    "PSN sequence error": "packets arrived out of order or were lost",
    "remote operational error": "the server could not place the message: a receive too "
                                "short for it, or a queue pair in error",
    # iWARP has no NAK: the peer ends the connection with a TERMINATE that says why
    "TERMINATE": "the server's device ended the connection: an operation it refused (a "
                 "wrong STag or address, memory registered without the remote access the "
                 "operation needs, or an operation iWARP does not have)",
}
_REQUESTS = ("CM_REQ", "MPA_REQUEST")  # RDMA CM's connection request on RoCE, on iWARP


@dataclass
class ProgramRun:
    """One program's run in a node: exit None when it did not end in time (or never ran)."""

    role: str  # "program" (a one-node lesson), "server" or "client"
    node: str
    exit: int | None
    stdout: str = ""
    stderr: str = ""
    reason: str = ""  # why it has no exit (a timeout, a node that could not be asked)


@dataclass
class Observation:
    runs: list[ProgramRun]
    build_error: str = ""  # the compiler's first lines when the code did not build
    sent: dict[str, dict[str, int]] = field(default_factory=dict)  # side -> opcode -> n
    naks: list[str] = field(default_factory=list)  # 'NAK: remote access error', 'RNR NAK'
    counters: dict[str, dict[str, int] | None] = field(default_factory=dict)  # side -> change
    devinfo: dict[str, str] | None = None  # ibv_devinfo -v in the program's node
    resent: dict[str, int] = field(default_factory=dict)  # side -> packets seen again
    fault_hit: int | None = None  # packets the lesson's fault acted on (None: not read)
    fault_description: str = ""  # `drop write count=12`
    # the connection's setup on the wire in capture order: (side, CM_REQ/CM_REP/CM_RTU/
    # CM_REJ/... or MPA_REQUEST/MPA_REPLY, the message's fields)
    connection: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    dest_qps: dict[str, dict[int, int]] = field(default_factory=dict)  # side -> QP -> n
    side_channel: int = 0  # TCP segments with data between the nodes that are not iWARP


@dataclass
class Finding:
    check: str
    passed: bool
    text: str

    def to_dict(self) -> FindingRecord:
        return {"check": self.check, "passed": self.passed, "text": self.text}


def fnv1a64(data: bytes) -> str:
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{value:016x}"


def expected_digest(size: int = MESSAGE_BYTES) -> str:
    """The digest of the pattern the client sends (byte i is i % 251)."""
    return fnv1a64(bytes(i % 251 for i in range(size)))


def devinfo_fields(text: str) -> dict[str, str]:
    """`name: value` lines (ibv_devinfo's, with its tabs, or a learner's): the first value
    of each name."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = _FIELD.match(line)
        if match and match.group(1) not in found:
            found[match.group(1)] = match.group(2)
    return found


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _explained(check: ExitCheck, run: ProgramRun) -> str:
    """What the lesson says of this failed run's error output, if it names a known mistake."""
    for explain in check.explains:
        if re.search(explain.matches, run.stderr + "\n" + run.stdout, re.IGNORECASE):
            return f": {explain.says}"
    return ""


def _exits(check: ExitCheck, obs: Observation) -> list[Finding]:
    findings = []
    for run in obs.runs:
        who = "your program" if run.role == "program" else f"your {run.role}"
        if run.exit == 0:
            findings.append(Finding("exit", True, f"{who} exited 0 ({run.node})"))
        elif run.exit is None:
            findings.append(Finding("exit", False, f"{who} did not finish ({run.node}): "
                                    f"{run.reason or 'no exit status'}"))
        else:
            why = _last_line(run.stderr) or _last_line(run.stdout) or "no output"
            findings.append(Finding("exit", False, f"{who} exited {run.exit}: {why}"
                                    + _explained(check, run)))
    return findings


def _devinfo(check: DevinfoCheck, obs: Observation) -> list[Finding]:
    program = next((r for r in obs.runs if r.role == "program"), None)
    if obs.devinfo is None or program is None:
        return [Finding("devinfo", False, "ibv_devinfo could not be read in the node")]
    if program.exit != 0:
        return []  # the exit finding says why; a field list would only repeat it
    yours = devinfo_fields(program.stdout)
    findings = []
    for name in check.fields:
        truth = obs.devinfo.get(name)
        if name not in yours:
            findings.append(Finding("devinfo", False, f"your program printed no `{name}:` "
                                    f"line (ibv_devinfo says {truth})"))
        elif yours[name] != truth:
            findings.append(Finding("devinfo", False, f"{name}: yours is {yours[name]!r}, "
                                    f"ibv_devinfo's is {truth!r}"))
        else:
            findings.append(Finding("devinfo", True, f"{name}: {truth}, as ibv_devinfo says"))
    return findings


def _sent_text(sent: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(sent.items())) or "nothing"


def _opcodes(check: OpcodesCheck, obs: Observation) -> list[Finding]:
    sent = obs.sent.get(check.side, {})
    findings = []
    if check.any_of:
        if any(op in check.any_of for op in sent):
            findings.append(Finding("wire", True, f"your {check.side} sent "
                                    f"{_sent_text(sent)}"))
        else:
            findings.append(Finding("wire", False, check.says.format(found=_sent_text(sent))))
    if check.none_of:
        wrong = [op for op in sent if op in check.none_of]
        if wrong:
            findings.append(Finding("wire", False, check.says.format(found=", ".join(wrong))))
        else:
            findings.append(Finding("wire", True, f"your {check.side} sent none of "
                                    + ", ".join(check.none_of)))
    return findings


def _output(obs: Observation, side: str) -> str:
    run = next((r for r in obs.runs if r.role == side), None)
    return run.stdout if run else ""


def _digest(check: DigestCheck, obs: Observation) -> list[Finding]:
    found = _DIGEST.findall(_output(obs, check.side))
    other = "client" if check.side == "server" else "server"
    want = expected_digest()
    if not found:
        return [Finding("memory", False, f"the {check.side} printed no digest of its buffer "
                        f"(`buffer N bytes fnv1a64 HEX`): {check.says}")]
    size, digest = found[-1]
    if int(size) == MESSAGE_BYTES and digest == want:
        return [Finding("memory", True, f"the {check.side}'s buffer holds the {other}'s "
                        f"{MESSAGE_BYTES} bytes")]
    return [Finding("memory", False, check.says)]


def _prints(check: PrintsCheck, obs: Observation) -> list[Finding]:
    """The exact line, else the finding with {found}: the side's last line that starts as
    the wanted one does (`fetched 7` where `fetched 1000` was wanted)."""
    lines = [line.strip() for line in _output(obs, check.side).splitlines()]
    if check.line in lines:
        return [Finding("output", True, f"your {check.side} printed `{check.line}`")]
    word = check.line.split()[0]
    alike = [line for line in lines if line.split()[:1] == [word]]
    found = f"`{alike[-1][:200]}`" if alike else f"no `{word} ...` line"
    return [Finding("output", False, check.says.format(found=found))]


def _counter(check: CounterCheck, obs: Observation) -> list[Finding]:
    values = obs.counters.get(check.side)
    if values is None or check.name not in values:
        return [Finding("counters", False, f"the {check.side}'s device counters could not be "
                        f"read ({check.name})")]
    change = values[check.name]
    ok = (check.change is None or change == check.change) and \
         (check.at_least is None or change >= check.at_least)
    if ok:
        return [Finding("counters", True, f"the {check.side}'s {check.name} changed by "
                        f"{change}")]
    return [Finding("counters", False, f"{check.says} ({check.name} changed by {change})")]


def _fault(check: FaultCheck, obs: Observation) -> list[Finding]:
    if obs.fault_hit is None:
        return [Finding("fault", False, f"the fault's packet count could not be read "
                        f"({obs.fault_description or 'no fault on the lab'})")]
    if obs.fault_hit == check.hit:
        return [Finding("fault", True, f"the fault ({obs.fault_description}) acted on "
                        f"{obs.fault_hit} packets")]
    return [Finding("fault", False, check.says.format(found=obs.fault_hit))]


def _resent(check: ResentCheck, obs: Observation) -> list[Finding]:
    resent = obs.resent.get(check.side, 0)
    if resent <= check.at_most:
        return [Finding("wire", True, f"your {check.side} sent {resent} packets again that "
                        "had already reached the wire")]
    return [Finding("wire", False, check.says.format(found=resent))]


def _connect(check: ConnectCheck, obs: Observation) -> list[Finding]:
    seen = {(side, op) for side, op, _ in obs.connection}
    if not any(("client", op) in seen for op in _REQUESTS):
        if obs.side_channel:
            return [Finding("wire", False, "your programs exchanged QP numbers themselves "
                            f"over TCP and made no RDMA CM connection; {check.says}")]
        return [Finding("wire", False, "your client put no RDMA CM connection request on "
                        f"the wire; {check.says}")]
    if ("client", "MPA_REQUEST") in seen:
        return _connect_iwarp(obs)
    for side, op, fields in obs.connection:
        if op == "CM_REJ":
            return [Finding("wire", False, f"the {side} rejected the connection (CM_REJ, "
                            f"reason {fields.get('reason', '?')}): the server accepts with "
                            "rdma_accept on the id the CONNECT_REQUEST event brings, after "
                            "making its queue pair on that id")]
    if ("server", "CM_REP") not in seen:
        return [Finding("wire", False, "the server never accepted the connection request "
                        "(no CM_REP): on RDMA_CM_EVENT_CONNECT_REQUEST make the queue pair "
                        "on the event's id (rdma_create_qp) and call rdma_accept")]
    if ("client", "CM_RTU") not in seen:
        return [Finding("wire", False, "the client never completed the connection (no "
                        "CM_RTU after the server's CM_REP): after rdma_connect wait for "
                        "RDMA_CM_EVENT_ESTABLISHED")]
    findings = [Finding("wire", True, "your programs connected through RDMA CM (CM_REQ, "
                        "CM_REP, CM_RTU)")]
    replies = [f for side, op, f in obs.connection if side == "server" and op == "CM_REP"]
    connected = replies[-1].get("local_qpn")
    used = sorted(obs.dest_qps.get("client", {}))
    if isinstance(connected, int) and used:
        others = [qp for qp in used if qp != connected]
        if others:
            findings.append(Finding("wire", False, "your client sent its data to QP "
                                    + ", ".join(f"{qp:#x}" for qp in others)
                                    + f", not to the server's QP {connected:#x} that RDMA "
                                    "CM connected (in the CM_REP): post on the queue pair "
                                    "rdma_create_qp made on the connected id (id->qp)"))
        else:
            findings.append(Finding("wire", True, "your client's data went to the server's "
                                    f"QP {connected:#x}, the one RDMA CM connected"))
    return findings


def _connect_iwarp(obs: Observation) -> list[Finding]:
    replies = [f for side, op, f in obs.connection if side == "server" and op == "MPA_REPLY"]
    if not replies:
        return [Finding("wire", False, "the server never accepted the connection (no MPA "
                        "reply to the client's MPA request): on "
                        "RDMA_CM_EVENT_CONNECT_REQUEST make the queue pair on the event's "
                        "id (rdma_create_qp) and call rdma_accept")]
    if replies[-1].get("reject"):
        return [Finding("wire", False, "the server rejected the connection (an MPA reply "
                        "with the reject flag): accept with rdma_accept on the id the "
                        "CONNECT_REQUEST event brings")]
    return [Finding("wire", True, "your programs connected through RDMA CM (the MPA request "
                    "and reply on the TCP connection)")]


def _naks(obs: Observation) -> list[Finding]:
    findings = []
    for nak in dict.fromkeys(obs.naks):
        times = obs.naks.count(nak)
        kind = nak.removeprefix("NAK: ")
        advice = _NAK_ADVICE.get(kind, "")
        findings.append(Finding("wire", False, f"the server answered {nak} ({times} "
                                f"time{'s' if times > 1 else ''})"
                                + (f": {advice}" if advice else "")))
    return findings


def judge(lesson: Lesson, obs: Observation) -> list[Finding]:
    """Every finding, in the lesson's order of checks; passed iff all pass."""
    if obs.build_error:
        return [Finding("build", False, "your code does not compile:\n" + obs.build_error)]
    findings: list[Finding] = []
    for check in lesson.checks:
        if isinstance(check, ExitCheck):
            findings += _exits(check, obs)
        elif isinstance(check, DevinfoCheck):
            findings += _devinfo(check, obs)
        elif isinstance(check, OpcodesCheck):
            findings += _opcodes(check, obs)
        elif isinstance(check, DigestCheck):
            findings += _digest(check, obs)
        elif isinstance(check, CounterCheck):
            findings += _counter(check, obs)
        elif isinstance(check, PrintsCheck):
            findings += _prints(check, obs)
        elif isinstance(check, FaultCheck):
            findings += _fault(check, obs)
        elif isinstance(check, ResentCheck):
            findings += _resent(check, obs)
        elif isinstance(check, ConnectCheck):
            findings += _connect(check, obs)
    if lesson.roles == "pair":
        findings += _naks(obs)
    return findings


def passed(findings: list[Finding]) -> bool:
    return bool(findings) and all(f.passed for f in findings)
