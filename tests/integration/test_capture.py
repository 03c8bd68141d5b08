"""Capture on a live rxe lab: runs with --capture, the capture command, and no leftovers."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labctl.lab.handle import LabHandle
from labctl.net.labnet import netns_name
from labctl.wire.summary import decode_file
from tests.integration.capturecheck import assert_pingpong_on_the_wire
from tests.integration.conftest import REPO, labctl, only_record

pytestmark = pytest.mark.integration


def workers(lab: str) -> str:
    """Capture children of this lab still alive (their argv names the lab's namespace)."""
    found = subprocess.run(["pgrep", "-af", f"labctl.capture.worker .*-- {netns_name(lab)} "],
                           capture_output=True, text=True, check=False)
    return found.stdout.strip()


def packet_sockets(lab: str) -> list[str]:
    """Packet sockets open in the lab's namespace (a capture holds one; nothing else does)."""
    found = subprocess.run(["ip", "netns", "exec", netns_name(lab), "ss", "-a", "-0", "-H"],
                           capture_output=True, text=True, check=True)
    return [line for line in found.stdout.splitlines() if line.strip()]


def run_captured(lab: str, tmp_path: Path, *args: str) -> dict:  # type: ignore[type-arg]
    result = labctl("run", *args, "--lab", lab, "--capture-dir", str(tmp_path), "--json",
                    timeout=300)
    record = only_record(result.stdout)
    assert record["status"] == "passed", result.stdout + result.stderr
    assert Path(record["capture"]["pcap"]).parent == tmp_path
    assert not workers(lab)
    return record  # type: ignore[no-any-return]


def test_rc_pingpong_capture_matches_the_programs(lab_handle: LabHandle,
                                                  tmp_path: Path) -> None:
    record = run_captured(lab_handle.lab.name, tmp_path, "pingpong", "--transport", "rc",
                          "--iters", "3", "--size", "64")
    assert_pingpong_on_the_wire(record, 3)


def test_ib_write_bw_capture_shows_rdma_write_with_reth(lab_handle: LabHandle,
                                                        tmp_path: Path) -> None:
    record = run_captured(lab_handle.lab.name, tmp_path, "perftest", "ib_write_bw",
                          "--iters", "5", "--size", "4096")
    opcodes = record["capture"]["opcodes"]
    assert opcodes["RC_RDMA_WRITE_FIRST"] >= 5 and opcodes["RC_RDMA_WRITE_LAST"] >= 5
    firsts = [f for f in decode_file(Path(record["capture"]["pcap"]))
              if f.ops == ["RC_RDMA_WRITE_FIRST"]]
    assert all(f.detail["RETH"]["length"] == 4096 for f in firsts)


def test_rping_capture_shows_the_cm_handshake(lab_handle: LabHandle, tmp_path: Path) -> None:
    record = run_captured(lab_handle.lab.name, tmp_path, "rping", "--count", "2")
    cm = [op for f in decode_file(Path(record["capture"]["pcap"])) for op in f.ops
          if op.startswith("CM_")]
    assert cm[:3] == ["CM_REQ", "CM_REP", "CM_RTU"]


def test_interrupted_capture_writes_a_pcap_and_leaves_nothing(lab_handle: LabHandle,
                                                               tmp_path: Path) -> None:
    lab = lab_handle.lab.name
    pcap = tmp_path / "live.pcap"
    proc = subprocess.Popen([sys.executable, "-m", "labctl", "capture", "node1:eth1", "-w",
                             str(pcap), "--filter", "udp port 4791", "--lab", lab],
                            cwd=REPO, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        assert proc.stderr is not None
        started = proc.stderr.readline()
        assert "capturing on node1:eth1" in started, started + proc.stderr.read()
        assert workers(lab) and len(packet_sockets(lab)) == 1
        labctl("run", "pingpong", "--iters", "2", "--size", "64", "--lab", lab, check=True,
               timeout=300)
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        err = proc.stderr.read()
        assert proc.wait(30) == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
    assert re.search(r"(\d+) packets written", err)
    frames = decode_file(pcap)
    assert {"RC_SEND_ONLY", "RC_ACKNOWLEDGE"} <= {op for f in frames for op in f.ops}
    assert not workers(lab)
    assert packet_sockets(lab) == []


def test_capture_ends_by_itself_at_its_duration(lab_handle: LabHandle, tmp_path: Path) -> None:
    lab = lab_handle.lab.name
    started = time.monotonic()
    result = labctl("capture", "node2:eth1", "-w", str(tmp_path / "quiet.pcap"),
                    "--duration", "2", "--filter", "udp port 4791", "--lab", lab, timeout=120)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 60
    assert "packets written" in result.stderr
    assert decode_file(tmp_path / "quiet.pcap") == []  # nothing ran: an empty, valid pcap
    assert not workers(lab) and packet_sockets(lab) == []
