"""vmcapture.py, the Docker host VM's capture (stdlib python3 writing a pcap to stdout), run
here exactly as labctl runs it in the VM: `ip netns exec NS python3 -c BOOT DEVICE ...` with
its source on stdin. A throwaway namespace with a veth pair stands in for a lab's; static
neighbours let UDP go out without any peer. Needs root (as every labctl test)."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest
from pyroute2 import netns
from scapy.layers.inet import UDP
from scapy.layers.l2 import Ether
from scapy.utils import PcapReader, PcapWriter

from labctl.capture.target import compiled_filter
from labctl.engineside import vmcapture

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
SOURCE = resources.files("labctl.engineside").joinpath("vmcapture.py").read_text()
PEER_MAC = "02:00:00:00:00:02"


@pytest.fixture
def ns() -> Iterator[str]:
    """A namespace `labctl-ut-vmcap-PID`: va (10.9.9.1) <-> vb; capture on vb."""
    name = f"labctl-ut-vmcap-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        for args in (["link", "add", "name", "va", "type", "veth", "peer", "name", "vb"],
                     ["addr", "add", "10.9.9.1/24", "dev", "va"],
                     ["link", "set", "va", "up"], ["link", "set", "vb", "up"],
                     ["neigh", "add", "10.9.9.2", "lladdr", PEER_MAC, "dev", "va"]):
            subprocess.run(["ip", "-n", name, *args], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
    assert name not in netns.listnetns()


def start(ns: str, out: Path, *args: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c",
                             vmcapture.bootstrap(SOURCE), "vb", *args],
                            stdin=subprocess.PIPE, stdout=out.open("wb"),
                            stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(SOURCE.encode())
    proc.stdin.flush()
    assert proc.stderr.readline() == b"READY\n"
    return proc


def send_udp(ns: str, *ports: int) -> None:
    code = ("import socket, sys\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "for p in sys.argv[1:]:\n    s.sendto(b'x' * 20, ('10.9.9.2', int(p)))\n")
    subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code,
                    *map(str, ports)], check=True)


def finish(proc: subprocess.Popen[bytes]) -> str:
    assert proc.stderr is not None
    assert proc.wait(10) == 0
    return proc.stderr.read().decode()


def captured(path: Path) -> list[Ether]:
    with PcapReader(str(path)) as reader:
        return list(reader)


def workers(ns: str) -> str:
    found = subprocess.run(["pgrep", "-af", "labctl-vmcapture"], capture_output=True,
                           text=True, check=False).stdout
    return "\n".join(line for line in found.splitlines() if ns in line)


def test_filtered_capture_stops_at_eof_on_stdin(ns: str, tmp_path: Path) -> None:
    out = tmp_path / "vm.pcap"
    proc = start(ns, out, "--filter", compiled_filter("udp port 4791"))
    send_udp(ns, 4791, 9999, 4791)
    deadline = time.monotonic() + 20  # the frames are on the wire once they are in the file
    while len(out.read_bytes()) < 24 + 2 * (16 + 62) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.stdin is not None
    proc.stdin.close()  # what labctl's stop() does first
    assert finish(proc) == "COUNT 2\n"
    packets = captured(out)
    assert [p[UDP].dport for p in packets] == [4791, 4791]
    assert all(p.dst == PEER_MAC and len(p) == 62 for p in packets)
    assert not workers(ns)


def test_count_and_sigterm_end_it_too(ns: str, tmp_path: Path) -> None:
    proc = start(ns, tmp_path / "count.pcap", "--count", "2", "--filter",
                 compiled_filter("udp"))
    send_udp(ns, 1, 2, 3)
    assert finish(proc) == "COUNT 2\n"
    # Filtered: the veths' own IPv6 chatter (router solicitations, MLD) must not count.
    proc = start(ns, tmp_path / "term.pcap", "--filter", compiled_filter("udp"))
    proc.send_signal(signal.SIGTERM)
    assert finish(proc) == "COUNT 0\n"
    assert captured(tmp_path / "term.pcap") == []  # a header only: an empty, valid pcap
    started = time.monotonic()
    proc = start(ns, tmp_path / "duration.pcap", "--duration", "0.5")
    finish(proc)
    assert time.monotonic() - started < 10
    assert not workers(ns)


def test_the_pcap_header_is_scapys(tmp_path: Path, ns: str) -> None:
    """Same format as a qemu lab's capture (scapy's PcapWriter): magic, version, link type;
    only the snap length differs (libpcap's 262144, so GSO frames are never cut)."""
    proc = start(ns, tmp_path / "vm.pcap")
    assert proc.stdin is not None
    proc.stdin.close()
    finish(proc)
    PcapWriter(str(tmp_path / "scapy.pcap"), linktype=1).write_header(None)
    fields = "=IHHiIII"
    ours = struct.unpack(fields, (tmp_path / "vm.pcap").read_bytes()[:24])
    theirs = struct.unpack(fields, (tmp_path / "scapy.pcap").read_bytes()[:24])
    assert ours[:5] + ours[6:] == theirs[:5] + theirs[6:] and ours[5] == 262144


def test_bad_device_fails_in_one_line(ns: str, tmp_path: Path) -> None:
    proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c",
                             vmcapture.bootstrap(SOURCE), "nonexistent0"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    out, err = proc.communicate(SOURCE.encode(), timeout=30)
    assert proc.returncode == 1 and out == b""
    assert err.decode().startswith("capture failed: OSError") and err.count(b"\n") == 1


def test_filter_program_round_trip() -> None:
    text = compiled_filter("udp port 4791")
    count, program = vmcapture.filter_program(text)
    assert count == int(text.split(",")[0]) == len(program) // 8 > 2
    with pytest.raises(ValueError):
        vmcapture.filter_program("3,1 2 3 4")
