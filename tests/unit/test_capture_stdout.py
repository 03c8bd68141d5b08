"""`labctl capture NODE:IF -w -`: the pcap streamed to stdout, as `| tcpdump -r -` and
`| wireshark -k -i -` read it. A real labctl and its real capture worker, on a lab's
namespace made here as `up` names it (a qemu lab's tap stands in as a veth, whose other
end sends UDP to a static neighbour: no peer, no traffic outside the namespace). The
reader is another process reading the pipe with scapy. Needs root (as every labctl test).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyroute2 import netns

from labctl.net.labnet import tap_name
from labctl.store.labdir import LabDir
from labctl.topology.load import load_lab

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
REPO = Path(__file__).resolve().parents[2]
LAB = f"capstd-{os.getpid()}"  # at most 20 characters; per process (parallel runs)
NS = f"labctl-{LAB}"
PCAP_MAGIC = "a1b2c3d4"

# The reader: the global header first (it says so at once), then each record as it comes,
# decoded by scapy; `READER_RECORDS` records and it exits, closing the pipe (0: read to EOF).
READER = r"""
import os, struct, sys
from scapy.layers.inet import UDP
from scapy.layers.l2 import Ether
stream = sys.stdin.buffer
def exactly(n):
    data = b""
    while len(data) < n:
        more = stream.read(n - len(data))
        if not more:
            return None
        data += more
    return data
header = exactly(24)
magic, major, minor, _, _, _, linktype = struct.unpack("=IHHiIII", header)
print(f"header {magic:08x} {major}.{minor} linktype {linktype}", flush=True)
wanted = int(os.environ["READER_RECORDS"])
seen = 0
while wanted == 0 or seen < wanted:
    head = exactly(16)
    if head is None:
        break
    _, _, caplen, _ = struct.unpack("=IIII", head)
    packet = Ether(exactly(caplen))
    seen += 1
    print(f"udp {packet[UDP].dport}" if UDP in packet else packet.summary(), flush=True)
print("end", flush=True)
"""


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[dict[str, str]]:
    """An up-looking two-node qemu lab: its directory, and its namespace with node1:eth1's
    tap (a veth here) whose peer `c1` (10.9.7.1) can send."""
    env = {"LABCTL_STATE_DIR": str(tmp_path / "labs")}
    os.environ.update(env)
    try:
        topology = dataclasses.replace(load_lab(REPO / "topologies/two-node.yaml"), name=LAB)
        LabDir(LAB).create(topology)
    finally:
        del os.environ["LABCTL_STATE_DIR"]
    tap = tap_name(topology.node("node1").index, "eth1")
    subprocess.run(["ip", "netns", "add", NS], check=True)
    try:
        for args in (["link", "add", "name", tap, "type", "veth", "peer", "name", "c1"],
                     ["addr", "add", "10.9.7.1/24", "dev", "c1"],
                     ["link", "set", "c1", "up"], ["link", "set", tap, "up"],
                     ["neigh", "add", "10.9.7.2", "lladdr", "02:00:00:00:00:02", "dev", "c1"]):
            subprocess.run(["ip", "-n", NS, *args], check=True)
        yield env
    finally:
        # a test that failed half-way leaves no capture, reader or worker running
        for proc in STARTED:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        STARTED.clear()
        subprocess.run(["pkill", "-KILL", "-f", f"labctl.capture.worker .*-- {NS} "],
                       check=False)
        subprocess.run(["ip", "netns", "del", NS], check=False)
    assert NS not in netns.listnetns()


STARTED: list[subprocess.Popen[str]] = []  # what start() ran, for the fixture's cleanup


def send_udp(*ports: int) -> None:
    code = ("import socket, sys\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "for p in sys.argv[1:]:\n    s.sendto(b'x' * 20, ('10.9.7.2', int(p)))\n")
    subprocess.run(["ip", "netns", "exec", NS, sys.executable, "-c", code,
                    *map(str, ports)], check=True)


def start(env: dict[str, str], records: int, *args: str, reader_argv: list[str] | None = None
          ) -> tuple[subprocess.Popen[str], subprocess.Popen[str]]:
    """`labctl capture node1:eth1 -w - ARGS | reader`, once the capture is open."""
    capture = subprocess.Popen([sys.executable, "-m", "labctl", "capture", "node1:eth1",
                                "-w", "-", "--filter", "udp", *args],
                               cwd=REPO, env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert capture.stdout is not None and capture.stderr is not None
    reader = subprocess.Popen(reader_argv or [sys.executable, "-c", READER],
                              stdin=capture.stdout, stdout=subprocess.PIPE, text=True,
                              stderr=subprocess.DEVNULL,
                              env={**os.environ, "READER_RECORDS": str(records)})
    STARTED.extend((capture, reader))
    capture.stdout.close()  # the reader holds the pipe's only read end, as in a shell
    started = capture.stderr.readline()
    assert "capturing on node1:eth1" in started, started + capture.stderr.read()
    return capture, reader


def workers() -> str:
    found = subprocess.run(["pgrep", "-af", f"labctl.capture.worker .*-- {NS} "],
                           capture_output=True, text=True, check=False)
    return found.stdout.strip()


def finish(capture: subprocess.Popen[str], reader: subprocess.Popen[str],
           reader_code: int = 0) -> tuple[str, str]:
    """Both ended: the reader's lines and labctl's stderr; no capture worker is left."""
    assert capture.stderr is not None and reader.stdout is not None
    code = capture.wait(60)
    err = capture.stderr.read()
    assert code == 0 and "Traceback" not in err and "Exception" not in err, err
    out = reader.stdout.read()
    assert reader.wait(30) == reader_code, out
    deadline = time.monotonic() + 30
    while workers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert workers() == ""
    return out, err


def test_the_stream_is_a_pcap_read_as_it_comes(lab: dict[str, str]) -> None:
    capture, reader = start(lab, 0, "--count", "3")
    assert reader.stdout is not None
    # The header comes before any packet (a reader may wait for it to start).
    assert reader.stdout.readline() == f"header {PCAP_MAGIC} 2.4 linktype 1\n"
    send_udp(4791)
    assert reader.stdout.readline() == "udp 4791\n"  # flushed: read before the next is sent
    send_udp(9, 4791)
    out, err = finish(capture, reader)
    assert out == "udp 9\nudp 4791\nend\n"
    assert err.splitlines()[-1] == "3 packets written to stdout"


def test_a_reader_that_exits_ends_the_capture_cleanly(lab: dict[str, str]) -> None:
    """`| tcpdump -c 1 -r -`: the reader takes one packet and exits; labctl stops its
    capture (no --count, no --duration: only the closed pipe ends it) and exits 0."""
    capture, reader = start(lab, 1)
    send_udp(4791)
    for _ in range(20):  # packets after the reader exited: writes to a closed pipe
        if capture.poll() is not None:
            break
        send_udp(4792)
        time.sleep(0.1)
    out, err = finish(capture, reader)
    assert out == f"header {PCAP_MAGIC} 2.4 linktype 1\nudp 4791\nend\n"
    assert "the reader closed the stream" in err.splitlines()[-1], err


@pytest.mark.skipif(shutil.which("tshark") is None,
                    reason="tshark is not installed (apt-get install tshark)")
def test_tshark_reads_the_stream_and_its_exit_ends_the_capture(lab: dict[str, str]) -> None:
    """`labctl capture ... -w - | tshark -r - -c 2`: Wireshark's own reader takes two
    packets off the pipe and exits; labctl, with no limit of its own, ends with it."""
    capture, reader = start(lab, 0, reader_argv=["tshark", "-n", "-r", "-", "-c", "2",
                                                 "-T", "fields", "-e", "udp.dstport"])
    for _ in range(50):
        if capture.poll() is not None:
            break
        send_udp(4791)
        time.sleep(0.2)
    out, err = finish(capture, reader)
    assert out == "4791\n4791\n"
    assert "the reader closed the stream" in err.splitlines()[-1], err


def test_a_reader_that_exits_while_the_link_is_quiet(lab: dict[str, str]) -> None:
    """No packet comes after the reader exits, so no write fails: labctl sees the closed
    pipe itself, and ends at once rather than at the next packet."""
    capture, reader = start(lab, 0)
    assert reader.stdout is not None
    assert reader.stdout.readline().startswith("header ")
    reader.kill()  # as wireshark's window closed
    reader.wait(10)
    started = time.monotonic()
    _, err = finish(capture, reader, -signal.SIGKILL)
    assert time.monotonic() - started < 20
    assert err.splitlines()[-1] == "0 packets written to stdout; the reader closed the stream"


def test_a_terminal_is_refused(lab: dict[str, str]) -> None:
    """Binary pcap on a terminal is no use to anyone: exit 2 before anything starts."""
    import pty

    leader, follower = pty.openpty()
    try:
        result = subprocess.run([sys.executable, "-m", "labctl", "capture", "node1:eth1",
                                 "-w", "-"], cwd=REPO, env={**os.environ, **lab},
                                stdin=subprocess.DEVNULL, stdout=follower,
                                stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(follower)
        os.close(leader)
    assert result.returncode == 2, result.stderr
    text = " ".join(result.stderr.split())
    assert text.startswith("error: -w - writes pcap bytes to stdout, which is a terminal")
    assert "hint: pipe it to a reader" in text and "Traceback" not in text
    assert workers() == ""


@pytest.mark.parametrize(("args", "message"), [
    (("node1:eth1", "-w", "-", "--json"), "error: -w - streams the pcap to stdout; --json "
     "would print there too"),
    (("-w", "-", "--decode", "tests/unit/captures/rxe-rping.pcap"),
     "error: -w - streams the pcap to stdout; --decode reads a file"),
    (("node1:eth1", "-w", "-", "--absolute"), "error: --absolute changes the times"),
    (("--decode", "tests/unit/captures/rxe-rping.pcap", "--json", "--absolute"),
     "error: --absolute changes the times"),
])
def test_stdout_and_absolute_misuse_exits_2(args: tuple[str, ...], message: str) -> None:
    result = subprocess.run([sys.executable, "-m", "labctl", "capture", *args],
                            capture_output=True, text=True, timeout=120, cwd=REPO,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""  # nothing on stdout, ever, but pcap bytes
    text = " ".join(result.stderr.split())
    assert text.startswith(message) and "hint: " in text and "Traceback" not in text


@pytest.mark.parametrize("reader_exits", [False, True])
def test_the_docker_host_vm_stream_is_relayed_the_same_way(
        lab: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        reader_exits: bool) -> None:
    """A Docker host VM lab: vmcapture.py's stream comes back on the ssh's stdout. Here the
    "ssh" is the command it would run in the VM, run on this host (the namespace made
    above stands in for the VM's), so Capture's own relay of that stream is what is tested:
    into a pipe whose reader takes the pcap, or takes the header only and exits."""
    import threading

    from scapy.utils import PcapReader

    from labctl.capture.process import STDOUT, Capture
    from labctl.capture.target import VM, CaptureTarget
    from labctl.dockerhost.vm import DockerHostVM

    monkeypatch.setattr(DockerHostVM, "ssh_argv", lambda self, command: command)
    tap = tap_name(load_lab(REPO / "topologies/two-node.yaml").node("node1").index, "eth1")
    target = CaptureTarget("node1", "eth1", NS, tap, VM)
    read_end, write_end = os.pipe()
    got: list[bytes] = []

    def read() -> None:
        with os.fdopen(read_end, "rb") as stream:
            got.append(stream.read(24) if reader_exits else stream.read())

    reader = threading.Thread(target=read)
    reader.start()
    with os.fdopen(write_end, "wb") as sink, \
            Capture(target, STDOUT, count=0 if reader_exits else 2, duration=30,
                    bpf="udp", sink=sink) as cap:
        cap.wait_ready()
        if reader_exits:
            reader.join(10)
            assert not reader.is_alive()
        for _ in range(50):
            send_udp(4791)
            if cap.wait(0.2) is not None:
                break
        assert cap.wait(10) == 0, cap.errors
    reader.join(10)
    assert got[0][:4] == bytes.fromhex(PCAP_MAGIC)[::-1]  # little-endian, as written
    assert cap.reader_gone is reader_exits
    if not reader_exits:
        stream = tmp_path / "relayed.pcap"
        stream.write_bytes(got[0])
        with PcapReader(str(stream)) as pcap:
            assert len(list(pcap)) == 2 == cap.packets


@pytest.mark.parametrize("absolute", [False, True])
def test_live_lines_show_relative_or_absolute_times(lab: dict[str, str],
                                                    absolute: bool) -> None:
    """Without -w, one line per packet as it comes: seconds since the first by default."""
    from datetime import UTC, datetime

    args = ["--absolute"] if absolute else []
    proc = subprocess.Popen([sys.executable, "-m", "labctl", "capture", "node1:eth1",
                             "--count", "2", "--filter", "udp", *args],
                            cwd=REPO, env={**os.environ, **lab}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None and proc.stdout is not None
    assert "capturing on node1:eth1" in proc.stderr.readline()
    before = time.time()
    send_udp(4791)
    time.sleep(0.3)
    send_udp(4792)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    stamps = [line.split()[1] for line in out.splitlines()]
    assert len(stamps) == 2, out
    if absolute:
        when = [datetime.fromisoformat(s) for s in stamps]
        assert all(w.tzinfo == UTC and s.endswith("Z") for w, s in zip(when, stamps,
                                                                        strict=True))
        assert before - 1 < when[0].timestamp() < when[1].timestamp() < time.time()
    else:
        assert stamps[0] == "0.000000" and 0.2 < float(stamps[1]) < 30, stamps
