"""`labctl capture` as a user types it: decode, ladder, and bad input (exit 2, no traceback)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyroute2 import netns

from labctl.errors import UsageError
from labctl.store.labdir import LabDir
from labctl.store.state import EngineState, LabState, Phase
from labctl.topology.load import load_lab
from labctl.wire.decode import Frame
from labctl.wire.ladder import draw
from labctl.wire.summary import decode_file

REPO = Path(__file__).resolve().parents[2]
CAPTURES = Path(__file__).parent / "captures"
# Per process: two developers' unit runs at once (or two pytest-xdist workers) must not see
# each other's namespace. A lab name has at most 20 characters: "capture-offline-" left 4
# digits for the pid.
OFFLINE_LAB = f"capoff-{os.getpid()}"
# In parametrized messages, not the name itself: test ids must not depend on the pid
# (pytest-xdist's workers must collect the same tests).
NO_NETNS = "no network namespace {netns}"


def labctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "labctl", "capture", *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def test_decode_prints_one_line_per_packet_and_counts() -> None:
    result = labctl("--decode", str(CAPTURES / "rxe-rping.pcap"), "--first", "5")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 6
    assert " CM CM_REQ qp=0x000001 " in lines[0] and "port=7174" in lines[0]
    assert " CM_REP " in lines[1] and " CM_RTU " in lines[2]
    assert " RC_SEND_ONLY qp=0x000015 psn=0x483c32 ackreq " in lines[3]
    assert "AETH[syndrome=ACK" in lines[4]
    assert lines[5].startswith("counts: CM_REP 1, CM_REQ 1, CM_RTU 1, RC_ACKNOWLEDGE 1")


def test_ladder_png(tmp_path: Path) -> None:
    out = tmp_path / "ladder.png"
    result = labctl("--decode", str(CAPTURES / "rxe-ib-write-bw.pcap"), "--ladder", str(out),
                    "--first", "30")
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "ladder of 30 packets" in result.stderr


def test_ladder_without_matplotlib_is_a_usage_error(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the plot extra is missing
    frame = Frame(1, 0.0, "10.77.1.2", "10.77.1.1", "RoCEv2", ["RC_SEND_ONLY"], 1, 17)
    with pytest.raises(UsageError) as info:
        draw([frame], tmp_path / "x.png")
    assert info.value.exit_code == 2 and "labctl[plot]" in (info.value.hint or "")


@pytest.mark.parametrize(("args", "message"), [
    ((), "give NODE:IF"),
    (("--decode", "/nonexistent.pcap"), "no capture file"),
    (("--decode", "README.md"), "is not a pcap file"),
    (("--decode", "tests/unit/captures/rxe-rping.pcap", "--ladder", "x.txt"), ".png or .svg"),
    (("--ladder", "x.png"), "go with --decode"),
    (("node1:eth1", "--filter", "udp prt 4791"), "bad --filter"),
])
def test_bad_input_exits_2(args: tuple[str, ...], message: str) -> None:
    result = labctl(*args)
    assert result.returncode == 2, result.stderr
    assert message in " ".join(result.stderr.split()) and "Traceback" not in result.stderr
    assert f"labctl-{OFFLINE_LAB}" not in netns.listnetns()


@pytest.fixture
def offline_lab(tmp_path: Path) -> dict[str, str]:
    """A lab directory of a two-node qemu lab that is not running (no netns); a name no
    one else uses, and the test checks that no namespace of that name appears."""
    env = {"LABCTL_STATE_DIR": str(tmp_path / "labs")}
    os.environ.update(env)
    try:
        lab = dataclasses.replace(load_lab(REPO / "topologies/two-node.yaml"),
                                  name=OFFLINE_LAB)
        LabDir(lab.name).create(lab)
    finally:
        del os.environ["LABCTL_STATE_DIR"]
    return env


@pytest.mark.parametrize(("endpoint", "code", "message"), [
    ("node1", 2, "bad endpoint"),
    ("node9:eth1", 2, "has no node 'node9'"),
    ("node1:eth7", 2, "has no data interface 'eth7'"),
    ("node1:eth1", 1, NO_NETNS),  # lab not up
    ("node1:eth1 -w /nonexistent/x.pcap", 2,
     "--write '/nonexistent/x.pcap': no directory '/nonexistent'"),
])
def test_bad_endpoints(offline_lab: dict[str, str], endpoint: str, code: int,
                       message: str) -> None:
    result = labctl(*endpoint.split(), "--count", "1", env=offline_lab)
    assert result.returncode == code, result.stderr
    message = message.format(netns=f"labctl-{OFFLINE_LAB}")
    assert message in " ".join(result.stderr.split()) and "Traceback" not in result.stderr
    assert f"labctl-{OFFLINE_LAB}" not in netns.listnetns()


def _lab_dir(tmp_path: Path, topology: str, provider: str,
             state: LabState | None) -> dict[str, str]:
    """A lab directory of OFFLINE_LAB made from `topology` under `provider`, with `state`."""
    env = {"LABCTL_STATE_DIR": str(tmp_path / "labs")}
    os.environ.update(env)
    try:
        lab = dataclasses.replace(load_lab(REPO / "topologies" / topology), name=OFFLINE_LAB,
                                  provider=provider)
        labdir = LabDir(lab.name)
        labdir.create(lab)
        if state is not None:
            labdir.save_state(state)
    finally:
        del os.environ["LABCTL_STATE_DIR"]
    return env


@pytest.mark.parametrize(("engine", "message"), [
    # A local engine: the lab netns is on this host, as a qemu lab's (and it is not up).
    ("local", NO_NETNS),
    # The Docker host VM (none runs under this state directory).
    ("vm", "the Docker host VM is not running"),
])
def test_docker_lab_not_up(tmp_path: Path, engine: str, message: str) -> None:
    state = LabState(provider="docker", phase=Phase.UP, netns=f"labctl-{OFFLINE_LAB}",
                     engine=EngineState(engine, "unix:///nonexistent.sock"))
    env = _lab_dir(tmp_path, "docker-two-node.yaml", "docker", state)
    result = labctl("node1:eth1", "--count", "1", env=env)
    assert result.returncode == 1, result.stderr
    message = message.format(netns=f"labctl-{OFFLINE_LAB}")
    assert message in " ".join(result.stderr.split()) and "Traceback" not in result.stderr
    assert f"labctl-{OFFLINE_LAB}" not in netns.listnetns()


def test_vagrant_lab_is_refused_with_the_reason(tmp_path: Path) -> None:
    env = _lab_dir(tmp_path, "two-node.yaml", "vagrant", None)
    result = labctl("node1:eth1", "--count", "1", env=env)
    assert result.returncode == 2, result.stderr
    text = " ".join(result.stderr.split())
    assert "not supported for vagrant labs" in text and "VirtualBox or libvirt" in text
    assert "tcpdump" in text and "Traceback" not in result.stderr


def test_run_capture_on_a_vagrant_lab_is_refused(tmp_path: Path) -> None:
    env = _lab_dir(tmp_path, "two-node.yaml", "vagrant", None)
    result = subprocess.run([sys.executable, "-m", "labctl", "run", "pingpong", "--capture"],
                            capture_output=True, text=True, timeout=120, cwd=REPO,
                            env={**os.environ, **env}, stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result.stderr
    assert "not supported for vagrant labs" in " ".join(result.stderr.split())


def test_docker_lab_with_a_local_engine_is_captured_like_a_qemu_lab(tmp_path: Path) -> None:
    """A local engine's lab netns is on this host: the capture is the qemu path on the
    container's veth (`v1-eth1`, the bridge end dockernet.py makes). The namespace and the
    veth are made here as dockernet.py names them; its other end stays in the namespace."""
    ns = f"labctl-{OFFLINE_LAB}"
    state = LabState(provider="docker", phase=Phase.UP, netns=ns,
                     engine=EngineState("local", "unix:///nonexistent.sock"))
    env = _lab_dir(tmp_path, "docker-two-node.yaml", "docker", state)
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for args in (["link", "add", "name", "v1-eth1", "type", "veth", "peer", "name", "c1"],
                     ["addr", "add", "10.9.8.1/24", "dev", "c1"],
                     ["link", "set", "c1", "up"], ["link", "set", "v1-eth1", "up"],
                     ["neigh", "add", "10.9.8.2", "lladdr", "02:00:00:00:00:02", "dev", "c1"]):
            subprocess.run(["ip", "-n", ns, *args], check=True)
        pcap = tmp_path / "local.pcap"
        proc = subprocess.Popen([sys.executable, "-m", "labctl", "capture", "node1:eth1", "-w",
                                 str(pcap), "--count", "2", "--filter", "udp port 4791"],
                                cwd=REPO, env={**os.environ, **env}, stderr=subprocess.PIPE,
                                text=True, stdin=subprocess.DEVNULL)
        assert proc.stderr is not None
        started = proc.stderr.readline()
        assert f"(v1-eth1 in {ns})" in started, started + proc.stderr.read()
        code = ("import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                "for port in (9, 4791, 4791):\n    s.sendto(b'x' * 20, ('10.9.8.2', port))\n")
        subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code], check=True)
        assert proc.wait(60) == 0
        assert "2 packets written" in proc.stderr.read()
        # A killed labctl (no chance to stop its child): the worker sees its pipe close.
        killed = subprocess.Popen([sys.executable, "-m", "labctl", "capture", "node1:eth1"],
                                  cwd=REPO, env={**os.environ, **env}, stderr=subprocess.PIPE,
                                  stdout=subprocess.DEVNULL, text=True,
                                  stdin=subprocess.DEVNULL)
        assert killed.stderr is not None and "capturing on" in killed.stderr.readline()
        assert _workers(ns)
        killed.kill()
        killed.wait(30)
        deadline = time.monotonic() + 60
        while _workers(ns) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _workers(ns) == ""
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
    frames = decode_file(pcap)
    assert [(f.proto, f.src, f.dst) for f in frames] == [("RoCEv2", "10.9.8.1", "10.9.8.2")] * 2


def _workers(ns: str) -> str:
    found = subprocess.run(["pgrep", "-af", f"labctl.capture.worker .*-- {ns} "],
                           capture_output=True, text=True, check=False)
    return found.stdout.strip()


def test_decode_times_are_seconds_since_the_first_packet() -> None:
    path = CAPTURES / "rxe-rping.pcap"
    result = labctl("--decode", str(path), "--first", "4")
    assert result.returncode == 0, result.stderr
    stamps = [line.split()[1] for line in result.stdout.splitlines()[:4]]
    frames = decode_file(path, 4)
    assert stamps[0] == "0.000000"
    assert stamps == [f"{f.time - frames[0].time:.6f}" for f in frames]
    assert stamps == sorted(stamps, key=float) and float(stamps[-1]) > 0


def test_decode_absolute_times_are_utc_iso_8601_with_microseconds() -> None:
    from datetime import UTC, datetime

    path = CAPTURES / "rxe-rping.pcap"
    result = labctl("--decode", str(path), "--first", "3", "--absolute")
    assert result.returncode == 0, result.stderr
    stamps = [line.split()[1] for line in result.stdout.splitlines()[:3]]
    assert all(len(s) == len("2026-01-02T03:04:05.123456Z") and s.endswith("Z")
               for s in stamps), stamps
    when = [datetime.fromisoformat(s) for s in stamps]
    assert all(w.tzinfo == UTC for w in when)
    assert [round(w.timestamp(), 6) for w in when] == [round(f.time, 6)
                                                       for f in decode_file(path, 3)]


def test_decode_json_keeps_the_absolute_time() -> None:
    import json

    path = CAPTURES / "rxe-rping.pcap"
    result = labctl("--decode", str(path), "--first", "2", "--json")
    assert result.returncode == 0, result.stderr
    times = [json.loads(line)["time"] for line in result.stdout.splitlines()]
    assert times == [f.time for f in decode_file(path, 2)] and times[0] > 1e9


def test_the_docs_timestamp_sample_is_what_the_command_prints() -> None:
    """docs/wire.md's --absolute sample, regenerated: a drift in the line format shows."""
    command = "labctl capture --decode tests/unit/captures/rxe-rping.pcap --first 2 --absolute"
    text = (REPO / "docs/wire.md").read_text()
    sample = text.split(f"$ {command}\n", 1)[1].split("```", 1)[0]
    result = labctl(*command.split()[2:])
    assert result.returncode == 0, result.stderr
    assert result.stdout == sample
