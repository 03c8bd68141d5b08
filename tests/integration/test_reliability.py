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
from tests.integration.conftest import LAB_NAME, REPO, labctl

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


def _port_state(handle: LabHandle, node: str) -> str:
    return _in_node(handle, node, f"cat {PORT}/state").strip()


def _wait_port(handle: LabHandle, node: str, want: str, seconds: float = 30) -> float:
    started = time.monotonic()
    while _port_state(handle, node) != want:
        assert time.monotonic() - started < seconds, f"{node} port not {want}"
        time.sleep(0.5)
    return time.monotonic() - started


def _wait_traffic(handle: LabHandle, node: str, packets: int = 300) -> None:
    """Until `node` has received `packets` more RoCE packets: the run is in its data phase."""
    start = _counters(handle, node)["rcvd_pkts"]
    deadline = time.monotonic() + 60
    while _counters(handle, node)["rcvd_pkts"] < start + packets:
        assert time.monotonic() < deadline, "the run never got going"
        time.sleep(0.3)


def _pingpong(*args: str, timeout: float = 300) -> dict[str, object]:
    result = labctl("run", "pingpong", "--lab", LAB_NAME, "--json", *args, timeout=timeout)
    record: dict[str, object] = json.loads(result.stdout)
    assert (result.returncode == 0) == (record["status"] == "passed"), result.stderr
    return record


def _kill_in_node(handle: LabHandle, node: str, program: str) -> None:
    """Our own leftover runs in the node, by pid (the in-node bound would end them later)."""
    pids = handle.run(node, ["pgrep", "-x", program], timeout=30).stdout.split()
    if pids:
        handle.run(node, ["kill", "-9", *pids], timeout=30)


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
    config = _in_node(lab_handle, "node1", "sshd -T 2>/dev/null").splitlines()
    assert "passwordauthentication no" in config
    assert "kbdinteractiveauthentication no" in config
    assert "permitrootlogin without-password" in config
    assert _in_node(lab_handle, "node1", "cut -d: -f1,2 /etc/shadow | grep '^root:'").strip() \
        in ("root:*", "root:!", "root:!*")


# --- link faults ---------------------------------------------------------------------------


def test_loss_makes_rc_retransmit_and_shows(lab_handle: LabHandle, links_restored: None) -> None:
    base = _pingpong("--iters", "100", "--size", "4096")
    assert base["status"] == "passed"
    before = {n: _counters(lab_handle, n) for n in ("node1", "node2")}
    for node in ("node1", "node2"):
        labctl("link", "set", "--lab", LAB_NAME, f"{node}:eth1", "--loss", "5%", check=True)
    lossy = _pingpong("--iters", "100", "--size", "4096")
    after = {n: _counters(lab_handle, n) for n in ("node1", "node2")}
    assert lossy["status"] == "passed"  # RC delivered everything despite the loss
    retries = sum(after[n][c] - before[n][c] for n in after for c in RETRY_COUNTERS)
    assert retries > 0
    usec = [r["figures"]["usec_per_iter"] for r in (base, lossy)]  # type: ignore[index]
    assert usec[1] > 1.5 * usec[0], usec  # each lost packet waits for the retransmit timer

    labctl("link", "set", "--lab", LAB_NAME, "node1:eth1", "--clear", check=True)
    labctl("link", "set", "--lab", LAB_NAME, "node2:eth1", "--delay", "10ms", check=True)
    slow = _pingpong("--iters", "20", "--size", "64")
    assert slow["status"] == "passed"
    assert slow["figures"]["usec_per_iter"] >= 10_000  # type: ignore[index]
    for node in ("node1", "node2"):
        labctl("link", "set", "--lab", LAB_NAME, f"{node}:eth1", "--clear", check=True)
        assert "netem" not in _in_node(lab_handle, node, "tc qdisc show dev eth1")


def test_link_down_past_the_retry_budget_is_the_transports_error(
    lab_handle: LabHandle, links_restored: None
) -> None:
    """ib_write_bw with a retry budget of 3: the sender's completion fails with status 12
    (IBV_WC_RETRY_EXC_ERR) a few seconds after the receiver's cable is pulled."""
    server = lab_handle.popen("node1", ["sh", "-c", "echo $$; exec timeout 120 ib_write_bw "
                                        "-d rxe0 -R -n 10000000 --retry_count 3"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert server.stdout is not None
    server_pid = server.stdout.readline().strip()
    try:
        time.sleep(2)
        client = lab_handle.popen("node2", ["timeout", "120", "ib_write_bw", "-d", "rxe0", "-R",
                                            "-n", "10000000", "--retry_count", "3", "10.77.1.1"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        _wait_traffic(lab_handle, "node1", 2000)
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
        # sshd made the server's shell a session leader: its group is it and its children
        lab_handle.run("node1", ["kill", "-9", "--", f"-{server_pid}"], timeout=30)
        server.kill()
        server.wait()
    labctl("link", "set", "--lab", LAB_NAME, "node1:eth1", "up", check=True)
    assert _wait_port(lab_handle, "node1", "4: ACTIVE") < 30
    assert _pingpong("--iters", "20")["status"] == "passed"


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
        _wait_traffic(lab_handle, "node2")
        labctl("link", "set", "--lab", LAB_NAME, "node1:eth1", "down", check=True)
        out, _ = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        _kill_in_node(lab_handle, "node1", "ibv_rc_pingpong")
    took = time.monotonic() - started
    record = json.loads(out)
    assert run.returncode == 1 and record["status"] == "failed"
    assert "(timed out)" in record["reason"], record["reason"]
    assert took < 20 + 30, took  # the bound, its 5 s kill grace and ssh: never a hang
    labctl("link", "set", "--lab", LAB_NAME, "node1:eth1", "up", check=True)
    assert _wait_port(lab_handle, "node1", "4: ACTIVE") < 30
    assert _pingpong("--iters", "20")["status"] == "passed"


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
    assert _pingpong("--iters", "50")["status"] == "passed"


def test_node_killed_while_idle(lab_handle: LabHandle, lab_topology: Path) -> None:
    pid = _pids(lab_handle)["node2"]
    os.kill(pid, signal.SIGKILL)
    result = labctl("status", "--lab", LAB_NAME, "--json", timeout=120)
    assert result.returncode == 1
    nodes = {n["name"]: n for n in json.loads(result.stdout)["nodes"]}
    assert nodes["node2"]["state"] == "stopped"
    assert f"qemu process {pid} is gone" in nodes["node2"]["reason"]
    assert nodes["node1"]["state"] == "running"
    _repair(lab_handle, lab_topology, "node2")


def test_node_killed_during_a_pingpong(lab_handle: LabHandle, lab_topology: Path) -> None:
    started = time.monotonic()
    run = subprocess.Popen([sys.executable, "-m", "labctl", "run", "pingpong", "--lab", LAB_NAME,
                            "--iters", "10000000", "--timeout", "60", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        _wait_traffic(lab_handle, "node1")
        pid = _pids(lab_handle)["node2"]  # the client's node
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        out, _ = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        _kill_in_node(lab_handle, "node1", "ibv_rc_pingpong")
    record = json.loads(out)
    assert run.returncode == 1 and record["status"] == "failed"
    assert f"node node2 is stopped (qemu process {pid} is gone" in record["reason"], record
    assert time.monotonic() - killed < 20  # at once, well within the run's 60 s
    assert time.monotonic() - started < 60
    _repair(lab_handle, lab_topology, "node2")
