"""labctl's one reply format (labctl/nodeside/reply.py) and its one reader
(labctl/node/replies.read_reply).

The reader is fed what a hostile sender can print: too much, a line that never ends,
silence, not JSON, another format or version, its own error. The writers are run as labctl
runs them: the files sent as text go to `python3 -` on stdin with their arguments, the
shell answers run in sh, and what they print is read back by the reader.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from labctl import bounded, hostproc
from labctl.errors import LabctlError
from labctl.lab import counters
from labctl.node.replies import ErrorReply, UnreadableReply, read_reply
from labctl.nodeside import reply

PACKAGE = Path(__file__).resolve().parents[2] / "labctl"
# The files sent alone to a python3 elsewhere, each with its copy of the writers.
SENT_FILES = ["nodeside/faultgate.py", "engineside/dockernet.py", "engineside/portcheck.py"]
HINT = "a hint for the user"


def _read(stdout: str, code: int = 0, stderr: str = "", truncated: bool = False) -> object:
    result = hostproc.Completed(["sh"], code, stdout, stderr, truncated)
    return read_reply(result, sender="node1", doing="read the test of", hint=HINT)


def _refused(stdout: str, code: int = 0, stderr: str = "",
             truncated: bool = False) -> LabctlError:
    with pytest.raises(LabctlError) as refused:
        _read(stdout, code, stderr, truncated)
    assert refused.value.hint == HINT  # every refusal says what to do
    return refused.value


# --- the reader ---------------------------------------------------------------------------
def test_a_reply_line_gives_its_payload_and_what_precedes_it_is_not_read() -> None:
    assert _read(reply.line({"a": [1, "x"]}) + "\n") == {"a": [1, "x"]}
    assert _read("a tool's warning\n{not json either\n" + reply.line(None) + "\n") is None


BAD_LINES = [
    ("empty", "", "(an empty reply)"),
    ("not JSON", "hello\n", "(not JSON"),
    ("a list", "[1]\n", "(a JSON list, not an object)"),
    ("another format", '{"devices": []}\n', "(not a labctl reply (no 'labctl_reply'))"),
    ("another version", '{"labctl_reply": 2, "ok": true, "data": 1}\n',
     "(reply version 2; this labctl reads version 1)"),
    ("a version of 5,000 digits", '{"labctl_reply": ' + "9" * 5000 + "}\n",
     "not a number labctl accepts (5000 characters"),
    ("ok missing", '{"labctl_reply": 1, "data": 1}\n', "(ok is None, not true or false)"),
    ("no data", '{"labctl_reply": 1, "ok": true}\n', "(no 'data')"),
    ("an error without its message", '{"labctl_reply": 1, "ok": false, "error": 7}\n',
     "(an error reply without its message)"),
    ("100k-deep", '{"labctl_reply": 1, "ok": true, "data": ' + "[" * 100_000 + "]" * 100_000
     + "}\n", "nested deeper than 64 levels"),
    ("NaN", '{"labctl_reply": 1, "ok": true, "data": NaN}\n', "(NaN is not JSON)"),
    ("never ended", reply.line({"a": 1})[:-3], "(a reply that did not end (no newline after"),
]


@pytest.mark.parametrize(("name", "stdout", "why"), BAD_LINES, ids=[b[0] for b in BAD_LINES])
def test_a_bad_reply_line_is_unreadable_with_its_reason(name: str, stdout: str,
                                                        why: str) -> None:
    refused = _refused(stdout)
    assert isinstance(refused, UnreadableReply)
    assert refused.message.startswith("node1 sent an unreadable reply (") and why in refused.message


def test_a_reply_over_the_bound_is_unreadable_even_when_it_then_timed_out() -> None:
    for code in (0, hostproc.TIMED_OUT):
        refused = _refused(reply.line("x") + "\n", code, truncated=True)
        assert isinstance(refused, UnreadableReply)
        assert refused.message == "node1 sent an unreadable reply (more than 8388608 bytes)"


def test_a_reply_that_never_ends_costs_the_bound_and_the_time() -> None:
    """Endless output is cut at the bound (unreadable); a line never finished before the
    time ran out is no reply, said with the timeout."""
    try:
        hostproc.run([sys.executable, "-c", "import sys\nwhile 1: sys.stdout.write('y' * 65536)"],
                     timeout=5, check=False)
    except hostproc.HostProcessError as exc:
        endless = exc.result
    assert endless.truncated and len(endless.stdout) <= bounded.NODE_REPLY_BYTES
    with pytest.raises(UnreadableReply, match="more than"):
        read_reply(endless, sender="node1", doing="read the test of", hint=HINT)
    try:
        hostproc.run([sys.executable, "-c", "import sys, time\nsys.stdout.write("
                      "'{\"labctl_reply\": 1, '); sys.stdout.flush(); time.sleep(60)"],
                     timeout=1, check=False)
    except hostproc.HostProcessError as exc:
        unfinished = exc.result
    assert unfinished.returncode == hostproc.TIMED_OUT
    with pytest.raises(LabctlError, match=r"^cannot read the test of node1: \(timed out after"):
        read_reply(unfinished, sender="node1", doing="read the test of", hint=HINT)


def test_no_reply_says_how_the_command_failed() -> None:
    refused = _refused("", 255, "banner\nssh: connect to host 127.0.0.1 port 2222: refused\n")
    assert refused.message == ("cannot read the test of node1: ssh: connect to host "
                               "127.0.0.1 port 2222: refused")
    assert _refused("garbage", 1).message == "cannot read the test of node1: exit 1"
    assert len(_refused("", 1, "e" * 5000).message) < 400  # a reason, never a dump


def test_an_error_reply_is_the_senders_reason() -> None:
    refused = _refused(reply.error_line("tc: RTNETLINK answers: Invalid argument") + "\n", 1)
    assert isinstance(refused, ErrorReply)
    assert refused.message == ("cannot read the test of node1: tc: RTNETLINK answers: "
                               "Invalid argument")
    hostile = _refused(reply.error_line("\x1b]0;owned\x07" + "z" * 5000) + "\n", 1)
    assert "\x1b" not in hostile.message and "\\x1b" in hostile.message  # printable
    assert len(hostile.message) < 600 and hostile.message.endswith("…")
    assert _refused(reply.error_line("") + "\n").message.endswith(": no reason given")


# --- the writers --------------------------------------------------------------------------
def _sent(rel: str, *args: str) -> hostproc.Completed:
    """Run a sent file as labctl does: its text on a python3's stdin, `args` after `-`."""
    return hostproc.run([sys.executable, "-", *args], input=(PACKAGE / rel).read_text(),
                        timeout=60, check=False)


@pytest.mark.parametrize("rel", SENT_FILES)
def test_each_sent_files_writers_are_the_formats(rel: str) -> None:
    """The copies in the files sent alone write exactly what nodeside/reply.py writes."""
    namespace: dict[str, object] = {"__name__": "sent"}
    exec(compile((PACKAGE / rel).read_text(), rel, "exec"), namespace)
    data = {"a": [1, None, "é"], "b": {"c": True}}
    assert (namespace["REPLY_KEY"], namespace["REPLY_VERSION"]) == (reply.KEY, reply.VERSION)
    assert namespace["reply_line"](data) == reply.line(data)  # type: ignore[operator]
    if "reply_error_line" in namespace:
        assert namespace["reply_error_line"]("why") == reply.error_line("why")  # type: ignore[operator]


def test_the_fault_gate_answers_in_the_format() -> None:
    """`read` of a gate that is not there (no BPF file system needed) is a payload; a
    command it does not know is its error reply, exit 1."""
    read = _sent("nodeside/faultgate.py", "read", "labctl-ut-no-such-fault")
    assert read.returncode == 0
    assert read_reply(read, sender="node1", doing="read the gate of", hint=HINT) == {
        "labctl-ut-no-such-fault": None}
    wrong = _sent("nodeside/faultgate.py", "reload", "x")
    assert wrong.returncode == 1 and wrong.stdout.count("\n") == 1
    with pytest.raises(ErrorReply, match=r"^cannot load the gate in node1: unknown command "
                                         r"'reload' \(usage: python3 - load"):
        read_reply(wrong, sender="node1", doing="load the gate in", hint=HINT)
    missing = _sent("nodeside/faultgate.py", "load", "x", "opcodes=1")
    with pytest.raises(ErrorReply, match="missing"):
        read_reply(missing, sender="node1", doing="load the gate in", hint=HINT)


def test_the_network_helper_answers_in_the_format() -> None:
    wrong = _sent("engineside/dockernet.py", "teardown")  # its namespace argument missing
    assert wrong.returncode == 1
    with pytest.raises(ErrorReply, match=r"^cannot run dockernet in this host: list index"):
        read_reply(wrong, sender="this host", doing="run dockernet in", hint=HINT)
    unknown = _sent("engineside/dockernet.py", "bogus")
    with pytest.raises(ErrorReply, match="unknown command 'bogus'"):
        read_reply(unknown, sender="this host", doing="run dockernet in", hint=HINT)


def test_the_port_check_answers_in_the_format() -> None:
    checked = _sent("engineside/portcheck.py")  # no peer: nothing to try
    assert read_reply(checked, sender="the VM", doing="run the check in", hint=HINT) == {}


def _sh(script: str) -> hostproc.Completed:
    return hostproc.run(["sh", "-c", script], timeout=30, check=False)


def test_a_shell_answer_joins_its_values_and_fails_without_a_reply() -> None:
    script = reply.shell_answer({"one": "printf '[1,\\n2]\\n'", "two": "echo '{\"a\": \"b\"}'"})
    assert read_reply(_sh(script), sender="node1", doing="x", hint=HINT) == {
        "one": [1, 2], "two": {"a": "b"}}
    failing = reply.shell_answer({"one": "echo 1", "two": "echo 'tc: no such qdisc' >&2; false"})
    result = _sh(failing)
    assert result.returncode == 1 and result.stdout == ""
    with pytest.raises(LabctlError, match=r"^cannot read the links of node1: tc: no such qdisc$"):
        read_reply(result, sender="node1", doing="read the links of", hint=HINT)


@pytest.mark.skipif(not Path("/proc/net/snmp").is_file(), reason="no /proc/net/snmp")
def test_the_counters_command_answers_this_hosts_tcp_counters() -> None:
    """The counters' command run here (where `rdma` may be absent: an empty list) is read
    by the reader into the TCP counters /proc/net/snmp has."""
    payload = read_reply(_sh(counters._COMMAND[2]), sender="node1", doing="read the counters of",
                         hint=HINT)
    assert isinstance(payload, dict) and isinstance(payload["rdma"], list)
    tcp = counters.parse_snmp_tcp(payload["tcp"])
    assert set(tcp) == set(counters.TCP_COUNTERS)
    snmp = [line.split() for line in Path("/proc/net/snmp").read_text().splitlines()
            if line.startswith("Tcp:")]
    assert tcp["ActiveOpens"] <= int(dict(zip(*snmp, strict=True))["ActiveOpens"])


def test_the_reply_module_is_what_the_format_says() -> None:
    assert json.loads(reply.line([1])) == {"labctl_reply": 1, "ok": True, "data": [1]}
    assert json.loads(reply.error_line("x")) == {"labctl_reply": 1, "ok": False, "error": "x"}
    assert "\n" not in reply.line({"a": "multi\nline"})  # one line, whatever the payload


# --- the Docker host VM's engine start (engineside/docker-host-init.sh) ------------------
def _engine_answer(call: str) -> hostproc.Completed:
    """The script's two answers, its own functions run in sh (the rest needs the VM)."""
    script = (PACKAGE / "engineside" / "docker-host-init.sh").read_text()
    functions = [line for line in script.splitlines() if line.startswith(("fail()", "ready()"))]
    assert len(functions) == 2
    return _sh("\n".join([*functions, call]))


def test_the_engine_start_answers_in_the_format() -> None:
    for word, running in (("true", True), ("false", False)):
        started = _engine_answer(f"ready {word}")
        assert read_reply(started, sender="the VM", doing="start it in", hint=HINT) == {
            "already_running": running}
    failed = _engine_answer('fail "modprobe rdma_rxe"')
    assert failed.returncode == 1
    with pytest.raises(ErrorReply, match=r"^cannot start it in the VM: modprobe rdma_rxe$"):
        read_reply(failed, sender="the VM", doing="start it in", hint=HINT)


def test_a_failed_engine_start_says_why_with_the_logs_end(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    from labctl.dockerhost import vm as vm_module

    answer = _engine_answer('echo "dockerd: containerd did not start" >&2; '
                            'fail "dockerd exited 3 times (its log: below)"')
    monkeypatch.setattr(vm_module.DockerHostVM, "run",
                        lambda self, command, input=None, timeout=120: answer)
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path))
    with pytest.raises(LabctlError) as refused:
        vm_module.DockerHostVM()._start_engine(lambda text: None, 1e18, {})
    assert refused.value.message == (
        "cannot start the Docker engine in the Docker host VM: dockerd exited 3 times "
        "(its log: below)\ndockerd: containerd did not start")
    assert "/var/log/dockerd.log" in str(refused.value.hint)
