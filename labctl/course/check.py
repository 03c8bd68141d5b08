"""`labctl lesson check`: build the learner's program in the lesson's lab, run it (one node,
or a server and a client with the link captured and the counters read around the run), and
gather what was seen into a judge.Observation. Everything a node sends back is bounded by
LabHandle.run and the capture's own limits; the learner's code runs only inside the nodes."""

from __future__ import annotations

import dataclasses
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from labctl.capture.runhook import captured_runner
from labctl.course import SOURCE
from labctl.course.catalog import Lesson
from labctl.course.jail import RELEASE, RELEASE_SECONDS, fenced
from labctl.course.judge import Observation, ProgramRun, devinfo_fields
from labctl.course.lesson_fault import lesson_fault, refuse_faults_of_its_own
from labctl.errors import LabctlError, UsageError
from labctl.lab.handle import LabHandle
from labctl.runners.custom import DEFAULT_PORT, custom_spec
from labctl.runners.execute import RunResult
from labctl.runners.probes import CM_LISTEN, NetnsProbe, listening_probe
from labctl.wire.decode import Frame
from labctl.wire.ladder import MAX_LADDER
from labctl.wire.recovery import RETRANSMITTED, nak_mark
from labctl.wire.summary import iter_frames

NODE_DIR = "/mnt/lesson"  # where `lesson start` mounts the learner's folder
# Built once, in the first node, into the learner's folder as `make` would (every node
# mounts it and runs the same image): a second gcc under TCG costs 40 s on a busy host.
BUILD_DIR = f"{NODE_DIR}/build"
BUILD_SECONDS = 180.0  # gcc under TCG on a busy 2-core host
RUN_SECONDS = 120  # a Python side imports pyverbs: 16-26 s under TCG, more when busy
READY_SECONDS = 120.0  # for the server to listen: after its pyverbs import, in Python
BUILD_ERROR_LINES = 15
_EXIT_MARK = "--lesson-exit"
# The server is ready once it listens: on the TCP port (rdma_common's exchange) or with an
# RDMA CM id (a lesson that connects through RDMA CM opens no TCP listener on RoCE).
SERVER_LISTENS = NetnsProbe(f"{listening_probe(DEFAULT_PORT)} || {CM_LISTEN}")
_TCP_DATA = re.compile(r" len \d+$")  # a plain TCP segment's note when it carries data


@dataclass(frozen=True)
class Checked:
    observation: Observation
    pcap: Path | None  # the run's capture (pair lessons)
    frames: list[Frame]  # its decoded packets, for the ladder (at most MAX_LADDER)
    server: str
    client: str
    server_address: str = ""
    client_address: str = ""



def mounted_folder(handle: LabHandle) -> str:
    """The host folder the lab mounts at NODE_DIR, or UsageError: no lesson lab."""
    for node in handle.lab.nodes:
        for mount in node.mounts:
            if mount.target == NODE_DIR:
                return mount.source
    raise UsageError(f"lab {handle.lab.name} has no lesson folder at {NODE_DIR}",
                     hint="start the lesson first: `labctl lesson start N DIR`")


def _rdma_nodes(handle: LabHandle, lesson: Lesson) -> list[str]:
    nodes = [n.name for n in handle.lab.nodes if n.rdma == lesson.rdma]
    if len(nodes) < (2 if lesson.roles == "pair" else 1):
        raise UsageError(f"lab {handle.lab.name} has too few {lesson.rdma} nodes for lesson "
                         f"{lesson.number}",
                         hint=f"`labctl lesson start {lesson.number} DIR` brings up its lab")
    return nodes


def _program(lang: str) -> str:
    """The shell text that starts the learner's program in its fence (course/jail.py)."""
    if lang == "c":
        return fenced(f"{BUILD_DIR}/lesson")
    # no __pycache__ in the learner's folder
    return fenced(f"PYTHONDONTWRITEBYTECODE=1 python3 {NODE_DIR}/{SOURCE['python']}")


def _build(handle: LabHandle, node: str, lang: str) -> str:
    """The compiler's first lines when the code does not build in `node`, else "" (built
    once: every node mounts the folder and runs the same image)."""
    if lang == "c":
        command = f"make -s -C {NODE_DIR} O={BUILD_DIR}"
    else:  # a syntax error found before two nodes wait for each other
        command = ("python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), "
                   f"sys.argv[1])' {NODE_DIR}/{SOURCE['python']}")
    result = handle.run(node, ["sh", "-c", fenced(command)], timeout=BUILD_SECONDS)
    if result.returncode == 124:
        raise LabctlError(f"building the lesson in {node} took over {BUILD_SECONDS:.0f} s",
                          hint="the host may be busy; run the check again")
    if result.returncode != 0:
        lines = (result.stderr + result.stdout).strip().splitlines()
        return "\n".join(lines[:BUILD_ERROR_LINES]) or f"exit {result.returncode}"
    return ""


def _marked(command: str) -> str:
    """`command`, then its exit status on stderr (the run keeps both outputs as one)."""
    return f"{command}; rc=$?; echo \"{_EXIT_MARK} $rc\" >&2; exit $rc"


def _split_exit(output: str) -> tuple[int | None, str]:
    """The exit status the mark gave (None: the program never ended) and the output
    without the mark's line."""
    code: int | None = None
    kept = []
    for line in output.splitlines():
        head, _, value = line.partition(" ")
        if head == _EXIT_MARK and value.strip().isdigit():
            code = int(value)
        else:
            kept.append(line)
    return code, "\n".join(kept)


def _single(handle: LabHandle, lesson: Lesson, lang: str, node: str,
            run_seconds: int) -> Checked:
    device = handle.node_state(node)
    dev = device.rdma_dev if device else ""
    if not dev:
        raise LabctlError(f"{node} has no RDMA device in its state",
                          hint="`labctl status` shows the lab's devices")
    ran = handle.run(node, ["sh", "-c", f"{_program(lang)} -d {shlex.quote(dev)}"],
                     timeout=run_seconds)
    truth = handle.run(node, ["ibv_devinfo", "-v", "-d", dev], timeout=60)
    run = ProgramRun("program", node, None if ran.returncode == 124 else ran.returncode,
                     ran.stdout, ran.stderr,
                     f"no exit within {run_seconds} s" if ran.returncode == 124 else "")
    devinfo = devinfo_fields(truth.stdout) if truth.returncode == 0 else None
    return Checked(Observation([run], devinfo=devinfo), None, [], node, "")


def _wire(result: RunResult, obs: Observation, server_ip: str,
          client_ip: str) -> tuple[Path | None, list[Frame]]:
    """What each side sent and the NAKs, the connection's setup (RDMA CM on RoCE, MPA on
    iWARP) and the TCP between the nodes that is no RDMA, from the run's capture."""
    pcap = Path(result.capture["pcap"]) if result.capture else None
    frames: list[Frame] = []
    if pcap is None or not pcap.is_file():
        return None, frames
    sides = {client_ip: "client", server_ip: "server"}
    for frame in iter_frames(pcap):
        side = sides.get(frame.src)
        if side is None or sides.get(frame.dst) is None:
            continue
        if frame.proto == "TCP":
            obs.side_channel += bool(_TCP_DATA.search(frame.note))
            continue
        if frame.proto not in ("RoCEv2", "CM", "iWARP") or not frame.ops:
            continue
        if len(frames) < MAX_LADDER:
            frames.append(frame)
        counts = obs.sent.setdefault(side, {})
        for op in frame.ops:
            counts[op] = counts.get(op, 0) + 1
        if frame.proto == "CM":
            obs.connection.append((side, frame.ops[0], dict(frame.detail.get("mad") or {})))
        elif frame.proto == "iWARP":
            for message in frame.detail.get("messages") or []:
                op = str(message.get("op", ""))
                if op.startswith("MPA_"):
                    obs.connection.append((side, op, dict(message)))
                elif op == "TERMINATE" and side == "server":
                    obs.naks.append(op)
        else:
            if frame.dest_qp is not None:
                qps = obs.dest_qps.setdefault(side, {})
                qps[frame.dest_qp] = qps.get(frame.dest_qp, 0) + 1
            nak = nak_mark(frame.detail.get("AETH") or {})
            if nak:
                obs.naks.append(nak)
            if frame.recovery == RETRANSMITTED:
                obs.resent[side] = obs.resent.get(side, 0) + 1
    return pcap, frames


def _address(handle: LabHandle, node: str) -> str:
    iface = handle.lab.node(node).rdma_interface
    return iface.address if iface else ""


def _pair(handle: LabHandle, lesson: Lesson, lang: str, server: str, client: str,
          capture_dir: Path | None, run_seconds: int) -> Checked:
    program = _program(lang)
    # iWARP has no GID index: a siw program connects through RDMA CM by address
    common = "-d {device} -p {port}" if lesson.rdma == "siw" else \
        "-d {device} -g {gid_index} -p {port}"
    spec = custom_spec(_marked(f"{program} server {common}"),
                       _marked(f"{program} client {{server_ip}} {common}"))
    spec = dataclasses.replace(spec, ready_seconds=min(READY_SECONDS, run_seconds),
                               ready_probe=lambda ctx: SERVER_LISTENS)
    run = captured_runner(True, capture_dir or handle.labdir.path / "captures")
    with lesson_fault(handle, lesson.fault, {"server": server, "client": client}) as fault:
        result = run(handle, spec, server, client,
                     {"timeout": run_seconds, "port": DEFAULT_PORT})
    runs = []
    for role, node, output in (("server", server, result.server_output),
                               ("client", client, result.client_output)):
        code, text = _split_exit(output)
        runs.append(ProgramRun(role, node, code, text, "",
                               "" if code is not None else result.reason or "it never ran"))
    obs = Observation(runs)
    if fault is not None:
        obs.fault_hit, obs.fault_description = fault.hit, fault.description
    for role, node in (("server", server), ("client", client)):
        node_counters = (result.counters or {}).get(node)
        if node_counters is not None:
            merged: dict[str, int] = {}
            for group, values in node_counters.items():
                if group != "tcp":
                    merged.update(values)
            obs.counters[role] = merged
    server_ip, client_ip = _address(handle, server), _address(handle, client)
    pcap, frames = _wire(result, obs, server_ip, client_ip)
    return Checked(obs, pcap, frames, server, client, server_ip, client_ip)


def lesson_nodes(handle: LabHandle, lesson: Lesson) -> list[str]:
    """The nodes the lesson's programs run in (the server's first)."""
    nodes = _rdma_nodes(handle, lesson)
    return nodes[:2] if lesson.roles == "pair" else nodes[:1]


def release(handle: LabHandle, nodes: list[str]) -> list[str]:
    """Kill whatever the learner's programs left running in `nodes` (their fence's
    cgroup): the nodes where something could not be killed."""
    left = []
    for node in nodes:
        result = handle.run(node, ["sh", "-c", RELEASE], timeout=RELEASE_SECONDS)
        if result.returncode != 0:
            left.append(node)
    return left


def check(handle: LabHandle, lesson: Lesson, lang: str,
          capture_dir: Path | None = None, run_seconds: int = RUN_SECONDS) -> Checked:
    """Build and run the learner's program for `lesson` in the lab (each side for at most
    `run_seconds`); what was seen. Nothing of the program runs on when this returns."""
    used = lesson_nodes(handle, lesson)
    if lesson.fault is not None:  # before a build the run could not use
        refuse_faults_of_its_own(handle)
    try:
        build_error = _build(handle, used[0], lang)
        if build_error:
            return Checked(Observation([], build_error=build_error), None, [], used[0],
                           used[1] if len(used) > 1 else "")
        if lesson.roles == "single":
            return _single(handle, lesson, lang, used[0], run_seconds)
        return _pair(handle, lesson, lang, used[0], used[1], capture_dir, run_seconds)
    finally:
        release(handle, used)
