"""Faults and isolation on the session's shared lab (conftest's `lab_handle`).

Each test leaves the lab as it found it: links up, netem cleared, killed nodes repaired.
- isolation and security: data plane only in the lab's netns, management on 127.0.0.1
  only, key 0600, no password login, no world-writable lab file
- link faults: 5% loss (RC retransmits, the figures show it), 10 ms delay, a link down
  longer than the retry budget (the transport's error, or labctl's bound: never a hang),
  the port ACTIVE again after the link comes back
- node loss: kill -9 of a node idle and during a pingpong; status says so; `up` repairs
  that node only
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyroute2 import IPRoute

from labctl.lab.handle import LabHandle
from labctl.paths import state_root
from labctl.runners.diagnose import DIAGNOSE_SECONDS
from labctl.runners.server import ServerProcess
from tests.integration.conftest import LAB_NAME, REPO, labctl, only_record

pytestmark = pytest.mark.integration
PORT = "/sys/class/infiniband/rxe0/ports/1"
RETRY_COUNTERS = ("completer_retry_err", "out_of_seq_request", "duplicate_request")


def _in_node(handle: LabHandle, node: str, command: str, timeout: float = 60) -> str:
    result = handle.run(node, ["sh", "-c", command], timeout=timeout)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _counters(handle: LabHandle, node: str) -> dict[str, int]:
    out = _in_node(handle, node, f"cd {PORT}/hw_counters && grep . *")
    return {k: int(v) for k, v in (line.split(":", 1) for line in out.split())}


def _netem_dropped(handle: LabHandle, node: str) -> int:
    """Packets netem dropped on the node's eth1 (tc -s: "Sent ... (dropped N, ...)")."""
    stats = _in_node(handle, node, "tc -s qdisc show dev eth1")
    return sum(int(n) for n in re.findall(r"\(dropped (\d+),", stats))


def _port_state(handle: LabHandle, node: str) -> str:
    return _in_node(handle, node, f"cat {PORT}/state").strip()


def _wait_port(handle: LabHandle, node: str, want: str, seconds: float = 30) -> float:
    started = time.monotonic()
    while _port_state(handle, node) != want:
        assert time.monotonic() - started < seconds, f"{node} port not {want}"
        time.sleep(0.5)
    return time.monotonic() - started


def _wait_traffic(
    handle: LabHandle, node: str, packets: int = 300,
    runs: tuple[subprocess.Popen[str], ...] = (),
) -> None:
    """Until `node` has received `packets` more RoCE packets: the run is in its data phase.
    Fails at once, with what they printed, when one of `runs` ends before that."""
    start = _counters(handle, node)["rcvd_pkts"]
    deadline = time.monotonic() + 60
    while (seen := _counters(handle, node)["rcvd_pkts"] - start) < packets:
        ended = [run for run in runs if run.poll() is not None]
        assert not ended, "a side ended before its data phase:\n" + "\n".join(
            f"{shlex.join(map(str, run.args))} exited {run.returncode}:\n{run.communicate()[0]}"
            for run in ended)
        assert time.monotonic() < deadline, (
            f"the run never got going: {node} received {seen} of {packets} packets in 60 s;"
            f" counters {_counters(handle, node)}")
        time.sleep(0.3)


def _explain(record: dict[str, object]) -> str:
    """What a failed run saw: the reason, both programs' output and labctl's failure
    snapshot of each node (a red CI explains)."""
    snapshots = record.get("diagnostics") or {}
    assert isinstance(snapshots, dict)
    return (f"{record['status']}: {record['reason']}\n--- server {record['server_argv']}\n"
            f"{record['server_output']}\n--- client {record['client_argv']}\n"
            f"{record['client_output']}"
            + "".join(f"\n--- snapshot of {node}\n{text}" for node, text in snapshots.items()))


def _run(example: str, *args: str, timeout: float = 300) -> dict[str, object]:
    result = labctl("run", *example.split(), "--lab", LAB_NAME, "--json", *args,
                    timeout=timeout)
    record: dict[str, object] = only_record(result.stdout)
    assert (result.returncode == 0) == (record["status"] == "passed"), result.stderr
    return record


def _pingpong(*args: str, timeout: float = 300) -> dict[str, object]:
    return _run("pingpong", *args, timeout=timeout)


def _passed(record: dict[str, object]) -> None:
    assert record["status"] == "passed", _explain(record)


def _kill_in_node(handle: LabHandle, node: str, program: str) -> None:
    """Our own leftover runs in the node, by pid (the in-node bound would end them later)."""
    pids = handle.run(node, ["pgrep", "-x", program], timeout=30).stdout.split()
    if pids:
        handle.run(node, ["kill", "-9", *pids], timeout=30)


def _end_pingpong_run(handle: LabHandle, run: subprocess.Popen[str]) -> None:
    """A `labctl run pingpong` started in the background, ended whatever the test did: the
    local process, and the server it left in node1."""
    if run.poll() is None:
        run.kill()
        run.wait()
    _kill_in_node(handle, "node1", "ibv_rc_pingpong")


@pytest.fixture
def links_restored(lab_handle: LabHandle) -> Iterator[None]:
    yield
    for node in ("node1", "node2"):
        labctl("link", "set", "--lab", LAB_NAME, f"{node}:eth1", "up", "--clear", timeout=120)
    for node in ("node1", "node2"):
        _wait_port(lab_handle, node, "4: ACTIVE")


# --- isolation and security --------------------------------------------------------------


def test_data_plane_lives_only_in_the_lab_netns(lab_handle: LabHandle) -> None:
    state = lab_handle.labdir.load_state()
    ns = state.netns
    with IPRoute(netns=ns) as ipr:
        links = {link.get("ifname"): link for link in ipr.get_links()}
        bridge = links["br0"]["index"]
        taps = {name for name, link in links.items() if link.get("master") == bridge}
    assert taps == {"t1-eth1", "t2-eth1"}
    host = {p.name for p in Path("/sys/class/net").iterdir()}
    assert not host & set(links) - {"lo"}, "a lab link is on the host"
    host_ns = os.readlink("/proc/self/ns/net")
    for index, info in enumerate(state.nodes.values(), start=1):
        pid = info.pid
        assert os.readlink(f"/proc/{pid}/ns/net") == host_ns  # only its 127.0.0.1 port
        held = [Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
                for fd in os.listdir(f"/proc/{pid}/fd")
                if os.readlink(f"/proc/{pid}/fd/{fd}") == "/dev/net/tun"]
        assert [f for f in held if f"iff:\tt{index}-eth1" in f], "qemu does not hold its tap"


def test_management_listens_on_loopback_only(lab_handle: LabHandle) -> None:
    pids = [info.pid for info in lab_handle.labdir.load_state().nodes.values()]
    sockets = subprocess.run(["ss", "-Hlntup"], capture_output=True, text=True,
                             check=True).stdout.splitlines()
    for pid in pids:
        local = [line.split()[4] for line in sockets if f"pid={pid}," in line]
        assert local, f"qemu {pid} listens nowhere"
        assert all(addr.startswith("127.0.0.1:") for addr in local), local
    for node in ("node1", "node2"):  # in the node, sshd is on the management NIC only
        listening = _in_node(lab_handle, node, "ss -Hltn 'sport = :22'").split()
        assert "10.0.2.15:22" in listening
        assert not [w for w in listening if w.startswith("10.77.")]


def test_lab_files_key_and_password_login(lab_handle: LabHandle) -> None:
    labdir = lab_handle.labdir.path
    assert stat.S_IMODE(labdir.stat().st_mode) & 0o007 == 0  # others: nothing at all
    assert stat.S_IMODE(lab_handle.labdir.ssh_key.stat().st_mode) == 0o600
    assert stat.S_IMODE(lab_handle.labdir.ssh_config.stat().st_mode) == 0o600
    writable = [str(p) for p in [labdir, *labdir.rglob("*")]
                if p.lstat().st_mode & stat.S_IWOTH]
    assert writable == []
    for parent in (state_root(), state_root().parent):
        assert not parent.stat().st_mode & stat.S_IWOTH
    # Offer only a password (and no master connection to reuse): refused before any prompt.
    attempt = subprocess.run(
        ["ssh", "-F", str(lab_handle.labdir.ssh_config), "-o", "ControlMaster=no",
         "-o", "ControlPath=none", "-o", "PubkeyAuthentication=no", "-o", "BatchMode=yes",
         "-o", "PreferredAuthentications=password,keyboard-interactive", "node1", "true"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert attempt.returncode == 255
    assert "Permission denied (publickey)" in attempt.stderr  # the only method offered
    # the management ssh server (dropbear) offers keys only: -s
    server = _in_node(lab_handle, "node1",
                      "tr '\\0' ' ' < /proc/$(cat /run/dropbear.pid)/cmdline").split()
    assert server[0] == "dropbear" and "-s" in server, server
    # the data-address sshds of MPI runs (OpenSSH) read the same policy from the payload
    config = _in_node(lab_handle, "node1",  # as labssh starts them: /run/sshd first
                      "mkdir -p /run/sshd && sshd -T 2>/dev/null").splitlines()
    assert "passwordauthentication no" in config
    assert "kbdinteractiveauthentication no" in config
    assert "permitrootlogin without-password" in config
    assert _in_node(lab_handle, "node1", "cut -d: -f1,2 /etc/shadow | grep '^root:'").strip() \
        in ("root:*", "root:!", "root:!*")


# --- link faults ---------------------------------------------------------------------------


# ib_send_lat under 5 % loss stalled once in a full CI run (2026-11-23): both sides had
# printed the results header and no row, the client timed out after 120 s. Not reproduced
# in 120 runs by hand (40 on a quiet host, 80 with two CPU hogs beside the lab). Allowed
# once by that signature, with labctl's failure snapshot printed; a second one fails.
def _stalled_in_data_phase(record: dict[str, object]) -> bool:
    header = "t_min[usec]"
    return ("timed out" in str(record["reason"]) and header in str(record["client_output"])
            and header in str(record["server_output"]))


def test_loss_makes_rc_retransmit_and_shows(lab_handle: LabHandle, links_restored: None) -> None:
    """perftest's ib_send_lat (RC SEND both ways, like the RC pingpong): unlike
    ibv_rc_pingpong it closes with a handshake over its socket before destroying its QP.
    ibv_rc_pingpong has none, so under loss the ACK of its last message can be lost after
    the peer has gone, and on rxe (retry_cnt 7 = retry forever) that side then waits for its
    bound: measured 1 run in 20 at 5 % loss (see docs/reliability.md)."""
    lat = ("perftest ib_send_lat", "--iters", "100", "--size", "4096")
    base = _run(*lat)
    _passed(base)
    before = {n: _counters(lab_handle, n) for n in ("node1", "node2")}
    for node in ("node1", "node2"):
        labctl("link", "set", "--lab", LAB_NAME, f"{node}:eth1", "--loss", "5%", check=True)
    for attempt in (1, 2):
        lossy = _run(*lat)
        if lossy["status"] == "passed":  # RC delivered everything despite the loss
            break
        assert attempt == 1 and _stalled_in_data_phase(lossy), _explain(lossy)
        print("ib_send_lat under loss stalled in its data phase; tried again. It said:\n"
              + _explain(lossy))
    after = {n: _counters(lab_handle, n) for n in ("node1", "node2")}
    dropped = {n: _netem_dropped(lab_handle, n) for n in ("node1", "node2")}
    retries = sum(after[n][c] - before[n][c] for n in after for c in RETRY_COUNTERS)
    # The evidence is in counters, not in timings (a busy TCG host moves the clean run's
    # average by 8x): netem dropped packets on both links, and rxe retransmitted.
    figures = {k: [r["figures"][k] for r in (base, lossy)]  # type: ignore[index]
               for k in ("t_typical_usec", "t_avg_usec", "t_max_usec")}
    assert all(dropped.values()) and retries > 0, (dropped, before, after, figures)

    labctl("link", "set", "--lab", LAB_NAME, "node1:eth1", "--clear", check=True)
    labctl("link", "set", "--lab", LAB_NAME, "node2:eth1", "--delay", "10ms", check=True)
    slow = _pingpong("--iters", "20", "--size", "64")  # no loss: no end race
    _passed(slow)
    assert slow["figures"]["usec_per_iter"] >= 10_000  # type: ignore[index]
    for node in ("node1", "node2"):
        labctl("link", "set", "--lab", LAB_NAME, f"{node}:eth1", "--clear", check=True)
        assert "netem" not in _in_node(lab_handle, node, "tc qdisc show dev eth1")


# A retry budget of 3 at a QP timeout of 2^18 x 4.096 us (1.07 s): about 4 s after the cable
# is pulled. perftest's default timeout (2^14: 67 ms, 0.27 s for the whole budget) was
# shorter than a loaded TCG host can stall a node: "Failed status 12" came with the cable in.
WRITE_BW = ["timeout", "120", "stdbuf", "-oL", "ib_write_bw", "-d", "rxe0", "-R", "-n",
            "10000000", "--retry_count", "3", "--qp-timeout", "18"]
# perftest -R's connect rejected with reason 8 (IB_CM_REJ_INVALID_SERVICE_ID: no listener)
# although its server listened and printed "Waiting for client to connect": seen twice in
# loaded loops, cause not known (docs/reliability.md). The runner tries such a setup again
# too (ExampleSpec.setup_failed).
CM_REJECTED = "Event: RDMA_CM_EVENT_REJECTED; error: 8"


def _write_bw_in_data_phase(handle: LabHandle) -> tuple[ServerProcess, subprocess.Popen[str]]:
    """An ib_write_bw pair past connection setup (node1 serves, node2 sends). Setup is
    retried, at most 3 times, only on perftest's own two-listener race; every attempt's
    output is in the failure message otherwise."""
    attempts: list[str] = []
    for _ in range(3):
        server = ServerProcess(handle, "node1", WRITE_BW)
        _in_node(handle, "node1", "i=0; until rdma res show cm_id | grep -q LISTEN; do "
                 "i=$((i+1)); [ $i -gt 600 ] && exit 1; sleep 0.1; done")
        client = handle.popen("node2", [*WRITE_BW, "10.77.1.1"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
        try:
            _wait_traffic(handle, "node1", 2000, runs=(client,))
            return server, client
        except AssertionError as exc:
            if client.poll() is None:
                client.kill()
            client.wait()
            server.stop(in_node=True)
            attempts.append(f"{exc}\n--- server output:\n{server.output()}")
            if CM_REJECTED not in str(exc):
                break
    raise AssertionError("\n=== next attempt ===\n".join(attempts))


def test_link_down_past_the_retry_budget_is_the_transports_error(
    lab_handle: LabHandle, links_restored: None
) -> None:
    """ib_write_bw with a retry budget of 3: the sender's completion fails with status 12
    (IBV_WC_RETRY_EXC_ERR) a few seconds after the receiver's cable is pulled."""
    server, client = _write_bw_in_data_phase(lab_handle)
    try:
        labctl("link", "set", "--lab", LAB_NAME, "node1:eth1", "down", check=True)
        pulled = time.monotonic()
        out, _ = client.communicate(timeout=60)
        took = time.monotonic() - pulled
        assert client.returncode not in (0, 124), out
        assert "Failed status 12" in out, out  # transport retry counter exceeded
        assert took < 20
        assert _port_state(lab_handle, "node1") == "1: DOWN"  # the node saw the carrier go
        assert _counters(lab_handle, "node2")["retry_exceeded_err"] >= 1
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        server.stop(in_node=True)
    labctl("link", "set", "--lab", LAB_NAME, "node1:eth1", "up", check=True)
    assert _wait_port(lab_handle, "node1", "4: ACTIVE") < 30
    _passed(_pingpong("--iters", "20"))


def test_link_down_under_the_verbs_pingpong_ends_at_its_timeout(
    lab_handle: LabHandle, links_restored: None
) -> None:
    """ibv_rc_pingpong asks for retry_cnt 7, which rxe takes as "retry forever" (like
    rnr_retry 7): no transport error comes, and labctl's --timeout ends the run."""
    started = time.monotonic()
    run = subprocess.Popen([sys.executable, "-m", "labctl", "run", "pingpong", "--lab", LAB_NAME,
                            "--iters", "10000000", "--timeout", "20", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        _wait_traffic(lab_handle, "node2", runs=(run,))
        labctl("link", "set", "--lab", LAB_NAME, "node1:eth1", "down", check=True)
        out, _ = run.communicate(timeout=120)
    finally:
        _end_pingpong_run(lab_handle, run)
    took = time.monotonic() - started
    record = only_record(out)
    assert run.returncode == 1 and record["status"] == "failed"
    assert "(timed out)" in record["reason"], record["reason"]
    # Never a hang: the bound, its 5 s kill grace, ssh, and the failure snapshot of both
    # nodes (read in parallel, each bounded by DIAGNOSE_SECONDS).
    assert took < 20 + 30 + DIAGNOSE_SECONDS, (took, record["seconds"])
    assert set(record["diagnostics"]) == {"node1", "node2"}, record["diagnostics"]
    assert "1: DOWN" in record["diagnostics"]["node1"]  # the snapshot saw the pulled cable
    labctl("link", "set", "--lab", LAB_NAME, "node1:eth1", "up", check=True)
    assert _wait_port(lab_handle, "node1", "4: ACTIVE") < 30
    _passed(_pingpong("--iters", "20"))


# --- node loss -----------------------------------------------------------------------------


def _pids(handle: LabHandle) -> dict[str, int]:
    return {n: i.pid for n, i in handle.labdir.load_state().nodes.items()}


def _repair(handle: LabHandle, topology: Path, dead: str) -> None:
    before = _pids(handle)
    result = labctl("up", str(topology), timeout=600)
    assert result.returncode == 0, result.stderr
    assert f"restarted {dead}" in result.stdout
    after = _pids(handle)
    assert after[dead] != before[dead]
    assert {n: p for n, p in after.items() if n != dead} == {
        n: p for n, p in before.items() if n != dead}  # the other node was left alone
    code = labctl("status", "--lab", LAB_NAME, "--json", timeout=120)
    assert code.returncode == 0, code.stdout
    _passed(_pingpong("--iters", "50"))


def _whole_again(topology: Path) -> None:
    """After a test that killed a node, whatever it got to: `up` restarts what is not
    running, so the tests after it find the shared lab whole."""
    if labctl("status", "--lab", LAB_NAME, "--json", timeout=120).returncode != 0:
        labctl("up", str(topology), timeout=600, check=True)


def test_node_killed_while_idle(lab_handle: LabHandle, lab_topology: Path) -> None:
    pid = _pids(lab_handle)["node2"]
    try:
        os.kill(pid, signal.SIGKILL)
        result = labctl("status", "--lab", LAB_NAME, "--json", timeout=120)
        assert result.returncode == 1
        (status,) = json.loads(result.stdout)["labs"]
        nodes = {n["name"]: n for n in status["nodes"]}
        assert nodes["node2"]["state"] == "stopped"
        assert f"qemu process {pid} is gone" in nodes["node2"]["reason"]
        assert nodes["node1"]["state"] == "running"
        _repair(lab_handle, lab_topology, "node2")
    finally:
        _whole_again(lab_topology)


def test_node_killed_during_a_pingpong(lab_handle: LabHandle, lab_topology: Path) -> None:
    started = time.monotonic()
    run = subprocess.Popen([sys.executable, "-m", "labctl", "run", "pingpong", "--lab", LAB_NAME,
                            "--iters", "10000000", "--timeout", "60", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        try:
            _wait_traffic(lab_handle, "node1", runs=(run,))
            pid = _pids(lab_handle)["node2"]  # the client's node
            os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
            out, _ = run.communicate(timeout=120)
        finally:
            _end_pingpong_run(lab_handle, run)
        record = only_record(out)
        assert run.returncode == 1 and record["status"] == "failed"
        assert f"node node2 is stopped (qemu process {pid} is gone" in record["reason"], record
        assert time.monotonic() - killed < 20  # at once, well within the run's 60 s
        assert time.monotonic() - started < 60
        _repair(lab_handle, lab_topology, "node2")
    finally:
        _whole_again(lab_topology)
