"""A node is untrusted (issue 35, docs/reliability.md "Trust boundaries"): whatever it sends
back, `status`, `devinfo`/`devices --json` and `run` end with a message, never a traceback,
in bounded time and memory.

The replies come from a real process: the lab's provider's exec_argv (how labctl reaches a
node) is pointed at a local script that prints the hostile reply, so the bytes travel the
same pipe, size bound and timeout as a node's. The lab directory is made as `up` makes it
(tests/unit/test_json_shapes.py), with node1's qemu stood in by a process carrying its
-pidfile marker and the console log captured from a live lab.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from labctl import bounded, hostproc
from labctl.cli import inspect as inspect_cli
from labctl.lab import handle as handle_module
from labctl.lab.handle import LabHandle
from labctl.node.ready import READY
from labctl.node.replies import UnreadableReply, node_status
from labctl.providers import provider_for
from labctl.providers.docker import BOOT_LOG_BYTES, DockerProvider
from labctl.providers.qemu import QemuProvider
from labctl.providers.vagrant import VagrantProvider
from labctl.runners import parsers
from labctl.runners.examples import EXAMPLES
from labctl.runners.execute import run_example
from labctl.store.labdir import LabDir
from labctl.topology.load import load_lab
from labctl.topology.resolved import Lab, Node
from labctl.vm.machine import node_machine
from tests.unit.clirun import run_main
from tests.unit.jsonshape import parsed
from tests.unit.standin import GOOD_STATUS, GOOD_STATUS_REPLY, LAB, ROOT
from tests.unit.standin import make_lab as _make_lab

# Prints the reply a hostile node would: the bytes of a file, N MiB on one line, output
# that never ends, or nothing for N seconds. The node's command (after the first two
# arguments) is ignored: the node answers what it likes.
REPLY_SCRIPT = r"""
import sys, time
kind, arg = sys.argv[1], sys.argv[2]
out = sys.stdout.buffer
if kind == "file":
    out.write(open(arg, "rb").read())
elif kind == "huge":
    chunk = b"x" * (1 << 20)
    for _ in range(int(arg)):
        out.write(chunk)
elif kind == "endless":
    chunk = b"y" * 65536
    while True:
        out.write(chunk)
elif kind == "silent":
    time.sleep(int(arg))
"""


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def _device(**changes: object) -> dict[str, object]:
    device = json.loads(GOOD_STATUS)["devices"][0]
    device.update(changes)
    return dict(device)


def _status(**changes: object) -> str:
    report = json.loads(GOOD_STATUS)
    report.update(changes)
    return json.dumps(report)


def _sent(payload: str | bytes) -> bytes:
    """`payload` (JSON text, or anything) as a node sends it: in a reply line."""
    text = payload.encode() if isinstance(payload, str) else payload
    return b'{"labctl_reply": 1, "ok": true, "data": ' + text + b"}\n"


# Bad replies a node may send and the words labctl's reason must contain. The reply line
# itself (labctl/nodeside/reply.py): not JSON, not an object, not labctl's format, another
# version, cut, empty, binary, too deep, not finite...
BAD_REPLY_LINES: list[tuple[str, bytes, str]] = [
    ("text", b"hello from a hostile node\n", "not JSON"),
    ("truncated JSON", GOOD_STATUS_REPLY[:40].encode() + b"\n", "not JSON"),
    ("cut before its end", GOOD_STATUS_REPLY[:40].encode(), "did not end"),
    ("empty", b"", "empty reply"),
    ("blank lines", b"\n\n  \n", "empty reply"),
    ("binary", b"\xff\xfe\x00\x01garbage\x80\n", "not JSON"),
    ("list", b"[]\n", "list, not an object"),
    ("string", b'"devices"\n', "string, not an object"),
    ("number", b"42\n", "number, not an object"),
    ("null", b"null\n", "null, not an object"),
    ("a bare status (an older node)", GOOD_STATUS.strip().encode() + b"\n",
     "not a labctl reply (no 'labctl_reply')"),
    ("another version", GOOD_STATUS_REPLY.replace('"labctl_reply":1', '"labctl_reply":2'
                                                  ).encode(), "reply version 2;"),
    ("version a string", GOOD_STATUS_REPLY.replace('"labctl_reply":1', '"labctl_reply":"1"'
                                                   ).encode(), "reply version '1'"),
    ("version true", GOOD_STATUS_REPLY.replace('"labctl_reply":1', '"labctl_reply":true'
                                               ).encode(), "reply version True"),
    ("ok missing", b'{"labctl_reply": 1, "data": {}}\n', "ok is None, not true or false"),
    ("ok a string", b'{"labctl_reply": 1, "ok": "yes", "data": {}}\n', "ok is 'yes'"),
    ("no data", b'{"labctl_reply": 1, "ok": true}\n', "no 'data'"),
    ("an error without its message", b'{"labctl_reply": 1, "ok": false}\n',
     "an error reply without its message"),
    ("100k-deep list", _deep(100_000).encode() + b"\n", "nested deeper"),
    ("NaN", b'{"labctl_reply": 1, "ok": true, "data": {"devices": [], "x": NaN}}\n',
     "NaN is not JSON"),
]
# ...and its payload, a node's status: not an object, a key missing, a field of the wrong
# type, too deep, not finite.
BAD_STATUS_PAYLOADS: list[tuple[str, bytes, str]] = [
    ("status a list", _sent("[]"), "a status that is a list, not an object"),
    ("status null", _sent("null"), "a status that is null, not an object"),
    ("no devices", _sent("{}"), "no 'devices'"),
    ("kernel not a release", _sent(_status(kernel="6.12; reboot")), "not a kernel release"),
    ("kernel a number", _sent(_status(kernel=612)), "not a kernel release"),
    ("devices not a list", _sent(_status(devices="rxe0")), "devices is a string"),
    ("devices an object", _sent(_status(devices={"name": "rxe0"})), "devices is an object"),
    ("device not an object", _sent(_status(devices=[1])), "devices[0] is a number"),
    ("device without name", _sent(_status(devices=[{"port_state": "ACTIVE"}])),
     "devices[0] has no 'name'"),
    ("name a number", _sent(_status(devices=[_device(name=7)])), "devices[0].name is a number"),
    ("gid_index a string", _sent(_status(devices=[_device(gid_index="1")])),
     "devices[0].gid_index is a string"),
    ("gid_index a boolean", _sent(_status(devices=[_device(gid_index=True)])),
     "devices[0].gid_index is a boolean"),
    ("gid_index a float", _sent(_status(devices=[_device(gid_index=1.5)])),
     "devices[0].gid_index is a number"),
    ("port_state null", _sent(_status(devices=[_device(port_state=None)])),
     "devices[0].port_state is null"),
    ("active_mtu a list", _sent(_status(devices=[_device(active_mtu=[1024])])),
     "devices[0].active_mtu is a list"),
    ("interfaces not a list", _sent(_status(interfaces="eth1")), "interfaces is a string"),
    ("interface mtu a string", _sent(_status(interfaces=[
        {"name": "eth1", "state": "UP", "mtu": "1500", "mac": None, "ipv4": []}])),
     "interfaces[0].mtu is a string"),
    ("interface ipv4 numbers", _sent(_status(interfaces=[
        {"name": "eth1", "state": "UP", "mtu": 1500, "mac": None, "ipv4": [1]}])),
     "interfaces[0].ipv4 holds a number"),
    ("100k-deep in devices", _sent(_status(devices=[]).replace(
        '"devices": []', '"devices": ' + _deep(100_000))), "nested deeper"),
    ("Infinity in a field", _sent(_status(devices=[_device(gid_index=1)]).replace(
        '"gid_index": 1', '"gid_index": Infinity')), "Infinity is not JSON"),
    ("-Infinity", _sent('{"devices": -Infinity}'), "-Infinity is not JSON"),
]
BAD_STATUS_REPLIES = BAD_REPLY_LINES + BAD_STATUS_PAYLOADS


def _replies(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, reply: bytes | tuple[str, str],
             node: str | None = None) -> None:
    """Every node (or just `node`; the others reply as a live node did) answers `reply`:
    bytes, or (kind, arg) of REPLY_SCRIPT."""
    good = tmp_path / "good-reply"
    good.write_text(GOOD_STATUS_REPLY)
    if isinstance(reply, bytes):
        path = tmp_path / "reply"
        path.write_bytes(reply)
        reply = ("file", str(path))

    def exec_argv(self: QemuProvider, name: str, command: list[str], *,
                  tty: bool = False) -> list[str]:
        kind, arg = reply if node in (None, name) else ("file", str(good))
        return [sys.executable, "-c", REPLY_SCRIPT, kind, arg, *command]

    monkeypatch.setattr(QemuProvider, "exec_argv", exec_argv)


def _no_traceback(*texts: str) -> None:
    for text in texts:
        assert "Traceback" not in text


# --- the status reply, checked field by field ---------------------------------------------
def _node_status(stdout: bytes | str, exit_code: int = 0) -> dict[str, object]:
    text = stdout.decode("utf-8", errors="replace") if isinstance(stdout, bytes) else stdout
    return node_status(subprocess.CompletedProcess(["sh"], exit_code, text, ""), "node1")


def test_a_live_nodes_reply_is_accepted_as_it_was() -> None:
    assert _node_status(GOOD_STATUS_REPLY) == {
        "devices": json.loads(GOOD_STATUS)["devices"],
        "interfaces": json.loads(GOOD_STATUS)["interfaces"],
        "kernel": None}  # a node of an older labctl: no release
    assert _node_status(_sent(_status(kernel="7.3.4+deb13-amd64")))["kernel"] == \
        "7.3.4+deb13-amd64"


def test_keys_beyond_the_documented_ones_are_dropped() -> None:
    """status --json has one shape (its schema forbids extra keys): a node cannot add
    any."""
    reply = _node_status(_sent(_status(devices=[_device(extra="x" * 100)], planted={"a": 1})))
    assert set(reply) == {"devices", "interfaces", "kernel"}
    assert "extra" not in reply["devices"][0]  # type: ignore[index]


@pytest.mark.parametrize(("name", "reply", "why"), BAD_STATUS_REPLIES,
                         ids=[r[0] for r in BAD_STATUS_REPLIES])
def test_every_bad_status_reply_is_refused_with_its_reason(name: str, reply: bytes,
                                                           why: str) -> None:
    with pytest.raises(UnreadableReply) as refused:
        _node_status(reply)
    assert refused.value.message.startswith("node1 sent an unreadable reply (")
    assert why in refused.value.message and "labctl exec node1 --" in str(refused.value.hint)


def test_a_cut_reply_is_refused() -> None:
    cut = hostproc.Completed(["sh"], 0, GOOD_STATUS_REPLY, "", truncated=True)
    with pytest.raises(UnreadableReply, match="more than 8388608 bytes"):
        node_status(cut, "node1")


# --- labctl status -------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "reply", "why"), BAD_STATUS_REPLIES,
                         ids=[r[0] for r in BAD_STATUS_REPLIES])
def test_status_shows_an_unreadable_reply_as_the_nodes_state(
        lab_running: LabDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], name: str, reply: bytes, why: str) -> None:
    _replies(monkeypatch, tmp_path, reply, node="node1")
    code, out, err = run_main(monkeypatch, capsys, "status", "--lab", LAB, "--json")
    assert code == 1  # a node is not running as it should
    (lab,) = parsed("status", out).labs  # valid JSON, its one shape
    node1, node2 = lab.nodes
    assert node1.state == "unreadable"
    assert node1.reason.startswith("node1 sent an unreadable reply (")
    assert why in node1.reason
    assert node1.devices == [] and node1.live_interfaces == []
    assert node2.state == "running" and node2.devices[0].name == "rxe0"
    _no_traceback(out, err)


def test_status_table_says_which_node_sent_what(
        lab_running: LabDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _replies(monkeypatch, tmp_path, b"[]", node="node2")
    code, out, err = run_main(monkeypatch, capsys, "status", "--lab", LAB)
    assert code == 1
    node2_rows = [line for line in out.splitlines() if "node2" in line]
    assert "unreadable (node2 sent" in node2_rows[0]  # the state column, wrapped in its cell
    _no_traceback(out, err)


@pytest.mark.parametrize(("reply", "why"), [
    (("huge", "12"), "more than 8388608 bytes"),  # more than NODE_REPLY_BYTES
    (("endless", "0"), "more than 8388608 bytes"),  # cut at the bound, then timed out
])
def test_status_of_a_node_whose_reply_is_too_large(
        lab_running: LabDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], reply: tuple[str, str], why: str) -> None:
    monkeypatch.setattr(handle_module, "STATUS_SECONDS", 3.0)
    _replies(monkeypatch, tmp_path, reply, node="node1")
    code, out, err = run_main(monkeypatch, capsys, "status", "--lab", LAB, "--json")
    assert code == 1
    node1 = parsed("status", out).labs[0].nodes[0]
    assert node1.state == "unreadable" and why in node1.reason
    _no_traceback(out, err)


def test_status_of_a_node_that_never_answers(
        lab_running: LabDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(handle_module, "STATUS_SECONDS", 2.0)
    _replies(monkeypatch, tmp_path, ("silent", "60"), node="node1")
    code, out, _ = run_main(monkeypatch, capsys, "status", "--lab", LAB, "--json")
    assert code == 0 or code == 1
    node1 = parsed("status", out).labs[0].nodes[0]
    assert node1.reason == "cannot read status of node1: (timed out after 2.0 s)"


# --- bounded memory: a 300 MB reply and a 400 MB console log -------------------------------
# Runs `labctl status` in a child (this tree first on sys.path) with exec_argv pointed at
# REPLY_SCRIPT and prints the child's own peak RSS (the reply generator is not labctl).
# 150 MB: the bound keeps 8 MiB of each stream; before it, the 300 MB reply took 1.8 GB
# and the 400 MB console 860 MB (measured for issue 35).
DRIVER = r"""
import sys
from labctl.providers.qemu import QemuProvider
script, kind, arg = sys.argv[1:4]
QemuProvider.exec_argv = lambda self, name, command, tty=False: [
    sys.executable, "-c", script, kind, arg]
from labctl.cli.app import main
sys.argv = ["labctl", "status", "--lab", "ut-replies", "--json"]
try:
    main()
except SystemExit:
    pass
finally:
    # VmHWM, not ru_maxrss: the latter survives exec, so it counts the forking pytest too
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
    print("MAXRSS_KIB", hwm, file=sys.stderr)
"""
RSS_LIMIT_KIB = 150 << 10


def _status_peak_rss(state: Path, kind: str, arg: str) -> tuple[int, str]:
    env = dict(os.environ, LABCTL_STATE_DIR=str(state), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", DRIVER, REPLY_SCRIPT, kind, arg],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
                          check=False)
    peak = int(proc.stderr.rsplit("MAXRSS_KIB", 1)[1].split()[0])
    return peak, proc.stdout


def test_a_300_mb_reply_costs_status_bounded_memory(lab_running: LabDir,
                                                    state_dir: Path) -> None:
    peak, out = _status_peak_rss(state_dir, "huge", "300")
    node1 = parsed("status", out).labs[0].nodes[0]
    assert node1.state == "unreadable" and "more than" in node1.reason
    assert peak < RSS_LIMIT_KIB, f"status peaked at {peak} KiB"


def test_a_400_mb_console_log_is_not_read_whole(lab_running: LabDir, state_dir: Path,
                                                tmp_path: Path) -> None:
    console = lab_running.node_dir("node1") / "console.log"
    with console.open("r+b") as log:  # the boot as captured, then 400 MB the guest wrote
        log.truncate(400 << 20)
        log.seek(0, os.SEEK_END)
        log.write(b"\nlabctl: stage user-code\n")
    good = tmp_path / "good"
    good.write_text(GOOD_STATUS_REPLY)
    peak, out = _status_peak_rss(state_dir, "file", str(good))
    node1 = parsed("status", out).labs[0].nodes[0]
    assert node1.state == "running"  # its ready line is at the start: still seen
    assert peak < RSS_LIMIT_KIB, f"status peaked at {peak} KiB"


def test_the_console_is_read_by_its_start_and_end(tmp_path: Path) -> None:
    machine = node_machine(LAB, "node1", tmp_path)
    tmp_path.mkdir(exist_ok=True)
    machine.console_log.write_bytes(b"labctl: ready dev=rxe0\n" + b"z" * (8 << 20)
                                    + b"\nlabctl: stage last\n")
    text = machine.console()
    assert len(text) < (2 << 20)
    assert machine.is_ready(text) and machine.stage(text) == "last"


@pytest.mark.parametrize("make", ["fifo", "symlink", "directory"])
def test_a_console_log_that_is_not_a_file_reads_as_empty(tmp_path: Path, make: str) -> None:
    machine = node_machine(LAB, "node1", tmp_path)
    if make == "fifo":
        os.mkfifo(machine.console_log)  # would block a plain read for ever
    elif make == "symlink":
        machine.console_log.symlink_to("/etc/passwd")
    else:
        machine.console_log.mkdir()
    assert machine.console() == ""


# --- devinfo / devices --json --------------------------------------------------------------
# (reply, words of the reason); devinfo prints one object per node.
BAD_DEVINFO_REPLIES: list[tuple[str, bytes, str]] = [
    ("text", b"ibv_devinfo: not what you think\n", "not JSON"),
    ("empty", b"", "empty reply"),
    ("binary", b"\x00\xff\xfe", "not JSON"),
    ("list", b"[1, 2]", "a list, not an object"),
    ("string", b'"x"', "a string, not an object"),
    ("100k-deep", _deep(100_000).encode(), "nested deeper"),
    ("NaN", b'{"schema": NaN}', "NaN is not JSON"),
    ("Infinity", b'{"schema": Infinity}', "Infinity is not JSON"),
]


@pytest.mark.parametrize(("name", "reply", "why"), BAD_DEVINFO_REPLIES,
                         ids=[r[0] for r in BAD_DEVINFO_REPLIES])
def test_devinfo_json_names_the_node_and_its_bad_reply(
        lab_running: LabDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], name: str, reply: bytes, why: str) -> None:
    _replies(monkeypatch, tmp_path, reply, node="node2")
    code, out, err = run_main(monkeypatch, capsys, "devinfo", "--lab", LAB, "--json")
    assert code == 1
    merged = json.loads(out)  # still one valid JSON object, keyed by node
    assert set(merged) == {"node1", "node2"}
    assert merged["node2"]["error"].startswith("unreadable reply: ")
    assert isinstance(merged["node1"], dict) and "error" not in merged["node1"]
    flat = " ".join(err.split())
    assert "node2 sent an unreadable reply (" in flat and why in flat
    _no_traceback(out, err)


@pytest.mark.parametrize(("reply", "why"), [(b"42", "a number, not a list or an object"),
                                            (b"[[[", "not JSON")])
def test_devices_json_names_the_node_and_its_bad_reply(
        lab_running: LabDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], reply: bytes, why: str) -> None:
    _replies(monkeypatch, tmp_path, reply)
    code, out, err = run_main(monkeypatch, capsys, "devices", "--lab", LAB, "--json")
    assert code == 1
    assert set(json.loads(out)) == {"node1", "node2"}
    assert why in " ".join(err.split())
    _no_traceback(out, err)


def test_devinfo_json_of_a_reply_that_never_ends(
        lab_running: LabDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Cut at the size bound, ended at the time bound: exit 124, the node's error."""
    monkeypatch.setattr(inspect_cli, "NODE_COMMAND_SECONDS", 2.0)
    _replies(monkeypatch, tmp_path, ("endless", "0"), node="node1")
    code, out, err = run_main(monkeypatch, capsys, "devinfo", "node1", "--lab", LAB,
                              "--json")
    assert code == 124
    assert "timed out after 2.0 s" in json.loads(out)["node1"]["error"]
    _no_traceback(out, err)


def test_devinfo_text_of_a_huge_reply_is_cut(
        lab_running: LabDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _replies(monkeypatch, tmp_path, ("huge", "20"), node="node1")
    code, out, err = run_main(monkeypatch, capsys, "devinfo", "node1", "--lab", LAB)
    assert code == 0
    assert len(out) == bounded.NODE_REPLY_BYTES
    assert "output cut at 8388608 bytes" in err


# --- labctl run ----------------------------------------------------------------------------
RUN_REPLIES = [*BAD_REPLY_LINES[:6], ("100k-deep", _deep(100_000).encode() + b"\n",
                                      "nested deeper")]


@pytest.mark.parametrize(("name", "reply", "why"), RUN_REPLIES, ids=[r[0] for r in RUN_REPLIES])
def test_run_fails_the_pair_whose_node_sent_an_unreadable_reply(
        lab_running: LabDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        name: object, reply: bytes, why: str) -> None:
    """A node whose GID index must be asked (not recorded at boot) answers garbage: the
    pair fails with the reason, nothing is started in the nodes."""
    state = lab_running.load_state()
    state.nodes["node2"].gid_index = None
    lab_running.save_state(state)
    _replies(monkeypatch, tmp_path, reply, node="node2")
    result = run_example(LabHandle(lab_running), EXAMPLES[("pingpong", "rc")], "node1",
                         "node2", {})
    assert result.status == "failed"
    assert result.reason.startswith("node2 sent an unreadable reply (") and why in result.reason
    assert result.server_output == result.client_output == ""


# What a node's example program may print: the parsers see the client's and server's output
# (at most NODE_REPLY_BYTES each) and must stay linear in it. 200k characters each.
HOSTILE_OUTPUTS: list[tuple[str, str]] = [
    ("newlines", "\n" * 200_000),
    ("spaces after a letter", "a" + " " * 200_000 + "x"),
    ("a setting then spaces", "Device : x" + " " * 200_000 + "y"),
    ("colons and spaces", "a" + " " * 100_000 + ":" + " " * 100_000 + "b"),
    ("letters and spaces", "a " * 100_000),
    ("one long word", "x" * 200_000),
    ("digits and tabs", "#bytes\n" + "1\t" * 100_000),
    ("cmtime header", "qp_conn\n" + "a a" * 66_000),
    ("address lines", "  local address: " + "," * 200_000),
    ("dashes", "-" * 200_000),
    ("binary", "\ufffd\x00" * 100_000),
]
# the output parsers defined there (not the bounded number parsers they import)
PARSERS = sorted(name for name in dir(parsers) if name.startswith("parse_")
                 and getattr(parsers, name).__module__ == parsers.__name__)


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize(("name", "output"), HOSTILE_OUTPUTS,
                         ids=[o[0] for o in HOSTILE_OUTPUTS])
def test_parsers_are_fast_on_hostile_output(parser: str, name: str, output: str) -> None:
    import time

    # CPU time of this process, not the wall clock: a busy host (CI beside other labs) made
    # a 1.0 s wall-clock bound fail at 1.2 s; the parsers are single-threaded pure Python
    started = time.process_time()
    figures = getattr(parsers, parser)(output)
    assert isinstance(figures, dict)
    # quadratic patterns took 2-270 s here (pingpong's address line, perftest's settings)
    assert time.process_time() - started < 1.0


# --- a lab.json with no nodes --------------------------------------------------------------
@pytest.mark.parametrize("args", [("devices",), ("devices", "--json"), ("devinfo",),
                                  ("devinfo", "--json"), ("exec", "--all", "--", "true")])
def test_a_lab_without_nodes_is_an_error_not_a_traceback(
        state_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        args: tuple[str, ...]) -> None:
    labdir = _make_lab(state_dir)
    raw = json.loads(labdir.lab_file.read_text())
    raw["nodes"], raw["segments"] = [], []
    labdir.lab_file.write_text(json.dumps(raw))
    code, out, err = run_main(monkeypatch, capsys, args[0], "--lab", LAB, *args[1:])
    assert code == 1
    flat = " ".join(err.split())
    # load_lab refuses it (labctl/topology/stored.py): what `down` then removes
    assert "lab.jsoniscorrupt(ValueError:nodes:none)" in "".join(err.split()), err
    assert f"labctl down --lab {LAB}" in flat
    assert out == ""
    _no_traceback(out, err)


# --- the Vagrant provider's probe, the Docker provider's container log ---------------------
def _vagrant(state: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
             reply: bytes) -> tuple[VagrantProvider, Node]:
    lab = load_lab(ROOT / "topologies" / "two-node.yaml")
    lab = Lab(LAB, "vagrant", lab.source, lab.nodes, lab.segments, {"accel": "auto"})
    labdir = LabDir(LAB, state)
    labdir.create(lab)
    provider = provider_for(lab, labdir)
    assert isinstance(provider, VagrantProvider)
    path = tmp_path / "reply"
    path.write_bytes(reply)
    monkeypatch.setattr(VagrantProvider, "exec_argv", lambda self, name, command, tty=False: [
        sys.executable, "-c", REPLY_SCRIPT, "file", str(path)])
    return provider, lab.nodes[0]


def test_vagrant_records_what_a_good_reply_says(state_dir: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    provider, node = _vagrant(state_dir, monkeypatch, tmp_path, GOOD_STATUS_REPLY.encode())
    device = json.loads(GOOD_STATUS)["devices"][0]
    assert provider.device_facts(node) == {
        "port_state": device["port_state"], "active_mtu": device["active_mtu"],
        "gid_index": device["gid_index"]}


@pytest.mark.parametrize(("name", "reply", "why"), BAD_STATUS_REPLIES,
                         ids=[r[0] for r in BAD_STATUS_REPLIES])
def test_vagrant_records_nothing_from_a_bad_reply(
        state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
        reply: bytes, why: str) -> None:
    """At `up`: the device facts stay unknown (a wrong-typed GID index never reaches
    state.json, from where `run` would pass it to the examples)."""
    provider, node = _vagrant(state_dir, monkeypatch, tmp_path, reply)
    assert provider.device_facts(node) == {}


class EndlessLogContainer:
    """A container whose log never ends, as docker-py streams it (bytes chunks)."""

    def __init__(self) -> None:
        self.closed = False
        self.asked: dict[str, object] = {}

    def logs(self, **options: object) -> Iterator[bytes]:
        self.asked = options
        return self._stream()

    def _stream(self) -> Iterator[bytes]:
        yield b"labctl: stage net\nlabctl: ready dev=rxe0 gid=1 mtu=1024 state=ACTIVE\n"
        try:
            while True:
                yield b"w" * 16384  # docker splits a long line into 16 KiB messages
        finally:
            self.closed = True


def test_a_containers_endless_log_is_read_to_a_bound() -> None:
    container = EndlessLogContainer()
    log = DockerProvider._logs(container, None)
    assert len(log) <= BOOT_LOG_BYTES and READY in log
    assert container.asked == {"stream": True, "follow": False}  # never waits for more
    assert container.closed


# --- the Docker host's network helper (a host shared with the labs' containers) -----------
HELPER_REPLIES: list[tuple[str, str, str]] = [
    ("nothing", "pass", "this host sent an unreadable reply (an empty reply)"),
    ("text", "print('no answer here')", "this host sent an unreadable reply (not JSON"),
    ("a list", "print('[1, 2]')", "(a JSON list, not an object)"),
    ("a bare answer (the old format)", "print('{\"removed\": []}')",
     "(not a labctl reply (no 'labctl_reply'))"),
    ("a list payload", "print('{\"labctl_reply\": 1, \"ok\": true, \"data\": [1]}')",
     "(a payload that is a list, not an object)"),
    ("100k-deep", "print('[' * 100000 + ']' * 100000)", "nested deeper"),
    ("NaN", "print('{\"removed\": NaN}')", "NaN is not JSON"),
    ("binary", "import sys; sys.stdout.buffer.write(bytes(range(256)))", "did not end"),
    ("a traceback", "raise RuntimeError('boom')",
     "cannot run the network helper (facts) in this host: RuntimeError: boom"),
    ("never ends", "import time; time.sleep(60)",
     "cannot run the network helper (facts) in this host: (timed out after 2 s)"),
    ("its error", "print('{\"labctl_reply\": 1, \"ok\": false, \"error\": \"no ip\"}')",
     "cannot run the network helper (facts) in this host: no ip"),
]


@pytest.mark.parametrize(("name", "script", "why"), HELPER_REPLIES,
                         ids=[h[0] for h in HELPER_REPLIES])
def test_a_bad_helper_answer_is_an_error_not_a_traceback(
        monkeypatch: pytest.MonkeyPatch, name: str, script: str, why: str) -> None:
    from labctl.dockerhost import engine
    from labctl.errors import LabctlError

    monkeypatch.setattr(engine, "helper_source", lambda: script)
    with pytest.raises(LabctlError) as refused:
        engine.Engine("local", "unix:///nonexistent").helper("facts", timeout=2)
    assert why in refused.value.message and refused.value.hint == engine.SENT_HINT


def test_a_good_helper_answer_is_its_reply_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from labctl.dockerhost import engine

    monkeypatch.setattr(engine, "helper_source", lambda: (
        "print('progress'); "
        "print('{\"labctl_reply\": 1, \"ok\": true, \"data\": {\"removed\": [\"x\"]}}')"))
    assert engine.Engine("local", "unix:///nonexistent").helper("facts") == {"removed": ["x"]}


# --- a device snapshot (labctl.verbs.records) from elsewhere --------------------------------
BAD_SNAPSHOTS: list[tuple[str, str]] = [
    ("not JSON", "devices: rxe0"),
    ("a list", "[]"),
    ("devices a number", '{"devices": 1}'),
    ("a device a string", '{"devices": ["rxe0"]}'),
    ("a device without name", '{"devices": [{"ports": []}]}'),
    ("ports an object", '{"devices": [{"name": "rxe0", "ports": {"a": 1}}]}'),
    ("attr a list", '{"devices": [{"name": "rxe0", "attr": [1]}]}'),
    ("a port without port_num", '{"devices": [{"name": "rxe0", "ports": [{}]}]}'),
    ("meta a string", '{"meta": "x"}'),
    ("100k-deep", _deep(100_000)),
]


@pytest.mark.parametrize(("name", "text"), BAD_SNAPSHOTS, ids=[b[0] for b in BAD_SNAPSHOTS])
def test_a_bad_snapshot_is_a_value_error(name: str, text: str) -> None:
    from labctl.verbs.records import Snapshot

    with pytest.raises(ValueError, match="not a device snapshot"):
        Snapshot.from_json(text)


@pytest.mark.parametrize(("name", "reply", "why"), RUN_REPLIES, ids=[r[0] for r in RUN_REPLIES])
def test_labctl_run_reports_the_unreadable_reply(
        lab_running: LabDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], name: str, reply: bytes, why: str) -> None:
    state = lab_running.load_state()
    state.nodes["node2"].gid_index = None
    lab_running.save_state(state)
    _replies(monkeypatch, tmp_path, reply, node="node2")
    code, out, err = run_main(monkeypatch, capsys, "run", "pingpong", "--lab", LAB, "--json")
    assert code == 1
    (record,) = parsed("run", out).records
    assert record.status == "failed" and record.client == "node2"
    assert record.reason.startswith("node2 sent an unreadable reply (") and why in record.reason
    _no_traceback(out, err)


# --- what a node says is text, never rich markup ------------------------------------------
MARKUP = "[/x]"  # a closing tag that matches nothing: a MarkupError if parsed as markup


def test_status_table_prints_a_nodes_words_as_text(
        lab_running: LabDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """node1's device fields carry markup; node2's reply is refused, its reason quoting
    markup."""
    (tmp_path / "node1").write_bytes(_sent(_status(devices=[_device(name=f"rxe{MARKUP}",
                                                                    port_state=MARKUP)])))
    (tmp_path / "node2").write_bytes(_sent(_status(devices=[_device(gid_index=MARKUP)])))

    def exec_argv(self: QemuProvider, name: str, command: list[str], *,
                  tty: bool = False) -> list[str]:
        return [sys.executable, "-c", REPLY_SCRIPT, "file", str(tmp_path / name)]

    monkeypatch.setattr(QemuProvider, "exec_argv", exec_argv)
    code, out, err = run_main(monkeypatch, capsys, "status", "--lab", LAB)
    assert code == 1  # node2 is unreadable
    node1_row = next(line for line in out.splitlines() if "node1" in line)
    assert f"rxe{MARKUP}" in node1_row and f"│ {MARKUP}" in node1_row
    node2_row = next(line for line in out.splitlines() if "node2" in line)
    assert "unreadable (node2 sent" in node2_row
    _no_traceback(out, err)


def test_run_prints_a_reason_quoting_markup_as_text(
        lab_running: LabDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    state = lab_running.load_state()
    state.nodes["node2"].gid_index = None
    lab_running.save_state(state)
    _replies(monkeypatch, tmp_path, _sent(_status(devices=[_device(gid_index=MARKUP)])),
             node="node2")
    code, out, err = run_main(monkeypatch, capsys, "run", "pingpong", "--lab", LAB)
    assert code == 1
    flat = " ".join(err.split())
    assert f"devices[0].gid_index is a string ('{MARKUP}')" in flat
    _no_traceback(out, err)


# --- a run's server: its output read as it comes -------------------------------------------
@pytest.mark.parametrize(("reply", "expected"), [
    (("huge", "20"), "output cut here"),  # 20 MiB on one line: kept to the bound
    (b"\xff\xfe binary \x80\n", "\ufffd\ufffd binary \ufffd"),  # not UTF-8: replaced
])
def test_a_servers_output_is_bounded_and_decoded(
        lab_running: LabDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        reply: bytes | tuple[str, str], expected: str) -> None:
    from labctl.runners.server import ServerProcess

    _replies(monkeypatch, tmp_path, reply)
    server = ServerProcess(LabHandle(lab_running), "node1", ["ibv_rc_pingpong"])
    assert server.wait(60)
    output = server.output()
    assert len(output) <= bounded.NODE_REPLY_BYTES + 100 and expected in output
