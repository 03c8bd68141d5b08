"""`labctl run nvmeof` and `labctl run nfs` (labctl.runners.storage): the parser on outputs
of real runs, the step order and the failure paths, the scripts' shapes.

The files tests/unit/outputs/nvmeof-*.txt and nfs-*.txt are `labctl run nvmeof|nfs --json`
records' client and server outputs from two-node rxe and siw labs of the trixie-workloads
image (qemu TCG, kernel 7.3.4, nvme-cli 2.13): passed runs, one that needed a second
connect on siw, a run whose server node was stopped mid-write (`labctl stop`), and a run
that found the previous run's target and connection still there.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from labctl.errors import UsageError
from labctl.runners import nfs, nvmeof, storage
from labctl.runners.example_spec import Endpoint, RunContext, check_options
from labctl.runners.storage import WORKLOADS, run_storage, transports
from labctl.runners.storageio import parse_storage_io
from labctl.topology.load import load_lab
from tests.unit.clirun import run_main

OUTPUTS = Path(__file__).parent / "outputs"
ROOT = Path(__file__).parents[2]
MIB8 = 8 * 1048576


def output(name: str) -> str:
    return (OUTPUTS / name).read_text()


# --- the parser on real outputs ------------------------------------------------------------
@pytest.mark.parametrize(("name", "target", "write_s", "read_s"), [
    ("nvmeof-rdma.client.siw.txt", "/dev/nvme0n1", 6.36709, 4.39204),
    ("nvmeof-tcp.client.siw.txt", "/dev/nvme0n1", 0.531142, 0.711492),
    ("nfs-rdma.client.rxe.txt", "/mnt/labctl-nfs-rdma", 4.50353, 2.43897),
    ("nfs-rdma.client.siw.txt", "/mnt/labctl-nfs-rdma", 2.17726, 1.70825),
    ("nvmeof-rdma.client.leftover.txt", "/dev/nvme0n1", 2.13978, 1.47115),
])
def test_a_passed_run_gives_dd_s_own_times_and_the_check(name: str, target: str,
                                                         write_s: float,
                                                         read_s: float) -> None:
    figures = parse_storage_io(output(name))
    assert figures["verified"] is True and "failed_step" not in figures
    assert figures["target"] == target
    assert figures["write_bytes"] == figures["read_bytes"] == MIB8
    assert figures["write_seconds"] == write_s and figures["read_seconds"] == read_s
    assert figures["write_mb_s"] == round(MIB8 / 1e6 / write_s, 2)
    # the wall time adds dd's start and the open: never less than dd's own
    assert figures["write_wall_seconds"] >= write_s and figures["read_wall_seconds"] >= read_s
    assert len(figures["sha256"]) == 64


def test_the_tries_a_connect_or_mount_took() -> None:
    """siw under a loaded host: discovery's and the subsystem's first Connect went
    unanswered (nvme-cli: "could not add new controller"), each second try passed."""
    text = output("nvmeof-rdma.client.siw-retry.txt")
    assert "could not add new controller: failed to write to nvme-fabrics device" in text
    assert "(try 2)" in text
    figures = parse_storage_io(text)
    assert figures["connect_tries"] == 2 and figures["verified"] is True
    assert parse_storage_io(output("nfs-tcp.client.rxe.txt"))["mount_tries"] == 1
    assert "connect_tries" not in parse_storage_io(output("nvmeof-rdma.client.siw.txt"))


def test_the_nfs_mount_is_the_one_asked_for() -> None:
    text = output("nfs-rdma.client.rxe.txt")
    assert "proto=rdma,port=20049" in text and "vers=4.2" in text
    assert parse_storage_io(text)["verified"] is True


@pytest.mark.parametrize("name", ["nvmeof-rdma.client.server-stopped.txt",
                                  "nfs-rdma.client.server-stopped.txt"])
def test_a_server_stopped_mid_write_fails_at_the_write(name: str) -> None:
    """dd failed with EIO (the controller lost, the soft mount timed out): no figures but
    the failed step; the kernel's own messages are in the output for the record."""
    text = output(name)
    figures = parse_storage_io(text)
    assert figures["failed_step"] == "write"
    assert "verified" not in figures and "write_mb_s" not in figures
    assert "Input/output error" in text and "dmesg: " in text


def test_bytes_that_came_back_different_are_not_verified() -> None:
    lines = output("nfs-rdma.client.rxe.txt").splitlines()
    sha = next(i for i, line in enumerate(lines) if line.startswith("labctl: sha256 "))
    written = lines[sha].split("written=")[1].split()[0]
    lines[sha] = f"labctl: sha256 written={written} read={'0' * 64}"
    lines[sha + 1] = "labctl: verified no"
    figures = parse_storage_io("\n".join(lines))
    assert figures["verified"] is False and figures["sha256"] == written


@pytest.mark.parametrize("text", ["", "labctl: write bytes=x ns=1",
                                  "labctl: write bytes=1 ns=0", "\x00" * 1000,
                                  "labctl: verified maybe", "labctl: read bytes=1" * 10000])
def test_the_parser_takes_anything(text: str) -> None:
    figures = parse_storage_io(text)
    assert "verified" not in figures
    assert figures.get("write_mb_s") is None  # a time of 0 gives no rate


def test_the_previous_run_s_leftovers_are_removed_first() -> None:
    client = output("nvmeof-rdma.client.leftover.txt").splitlines()
    server = output("nvmeof-rdma.server.leftover.txt").splitlines()
    nqn = "nqn.2014-08.org.rdma-lab:labctl.rxe1.rdma"
    assert client[0] == f"labctl: disconnected {nqn}"
    assert server[2] == f"labctl: removed subsystem {nqn}"
    assert server.index(f"labctl: removed subsystem {nqn}") < next(
        i for i, line in enumerate(server) if line.startswith("labctl: target "))


# --- the scripts ---------------------------------------------------------------------------
def _ctx(server_address: str = "10.77.1.1", options: dict[str, Any] | None = None
         ) -> RunContext:
    return RunContext(Endpoint("rxe1", "rxe0", "rxe", 1, server_address, "eth1"),
                      Endpoint("rxe2", "rxe0", "rxe", 1, "10.77.1.2", "eth1"),
                      options or {})


def _argvs(ctx: RunContext) -> list[list[str]]:
    return [builder(ctx) for w in WORKLOADS.values()
            for builder in (w.spec.server_argv, w.spec.client_argv, w.server_teardown,
                            w.client_cleanup)]


def test_every_script_is_valid_shell() -> None:
    argvs = _argvs(_ctx())
    assert len(argvs) == 4 * len(WORKLOADS) == 16
    for argv in argvs:
        assert argv[:2] == ["sh", "-c"] and argv[3] == "sh"
        done = subprocess.run(["sh", "-n", "-c", argv[2]], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def test_values_reach_the_scripts_as_arguments_only() -> None:
    """The script text is the same whatever the values: they are positional arguments."""
    odd = "10.0.0.1'; reboot; '"
    for plain, hostile in zip(_argvs(_ctx()), _argvs(_ctx(odd, {"size_mib": 3})),
                              strict=True):
        assert plain[2] == hostile[2] and odd not in hostile[2]
    assert any(odd in argv[4:] for argv in _argvs(_ctx(odd)))


def test_names_come_from_the_lab() -> None:
    ctx = _ctx(options={"size_mib": 5})
    setup = WORKLOADS[("nvmeof", "rdma")].spec.server_argv(ctx)
    assert setup[4:] == [nvmeof.NQN_PREFIX, "nqn.2014-08.org.rdma-lab:labctl.rxe1.rdma",
                         "7701", "rdma", "10.77.1.1", "4420",
                         "/dev/shm/labctl-nvmet-rdma.img", "5"]
    client = WORKLOADS[("nfs", "tcp")].spec.client_argv(ctx)
    assert client[4:] == ["10.77.1.1", "/srv/labctl-nfs-tcp", "/mnt/labctl-nfs-tcp", "tcp",
                          "2049", "5", "vers=4.2,proto=tcp,port=2049,soft,timeo=50,retrans=2"]
    assert WORKLOADS[("nfs", "rdma")].spec.server_argv(ctx)[4:] == [
        "/srv/labctl-nfs-rdma", "10.77.1.2", "rdma", "20049", "5"]
    assert nfs.PORTS["rdma"] == 20049


# --- options -------------------------------------------------------------------------------
def test_transport_choices() -> None:
    assert transports("both") == ("rdma", "tcp")
    assert transports("tcp") == ("tcp",)
    with pytest.raises(UsageError, match="unknown transport"):
        transports("iwarp")


@pytest.mark.parametrize("mib", [0, 129, True, 1.5])
def test_size_mib_is_bounded(mib: Any) -> None:
    with pytest.raises(UsageError, match="--size-mib"):
        check_options({"size_mib": mib})


@pytest.mark.parametrize("args", [["run", "nvmeof", "--size-mib", "0"],
                                  ["run", "nfs", "--transport", "iwarp"]])
def test_bad_values_exit_2_before_a_lab_is_opened(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str],
                                                  args: list[str]) -> None:
    code, _, err = run_main(monkeypatch, capsys, *args, "--lab", "no-such-lab")
    assert code == 2
    assert "--size-mib" in err or "unknown transport" in err
    assert "no-such-lab" not in err


# --- the steps, with a stand-in for the nodes ---------------------------------------------
def _fake_lab(monkeypatch: pytest.MonkeyPatch, replies: dict[str, tuple[int, str]],
              topology: str = "workloads.yaml") -> tuple[SimpleNamespace, list[str]]:
    """A handle whose nodes answer each step with (code, output) by the step's name:
    cleanup, setup, client, teardown (the name is told by the script)."""
    steps: list[str] = []
    scripts = {}
    for w in WORKLOADS.values():
        ctx = _ctx()
        scripts[w.client_cleanup(ctx)[2]] = "cleanup"
        scripts[w.spec.server_argv(ctx)[2]] = "setup"
        scripts[w.spec.client_argv(ctx)[2]] = "client"
        scripts[w.server_teardown(ctx)[2]] = "teardown"

    def run(node: str, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        assert argv[0] == "timeout" and timeout > float(argv[2])  # bounded in the node
        step = scripts[argv[argv.index("-c") + 1]]
        steps.append(f"{step} {node}")
        code, out = replies.get(step, (0, ""))
        return subprocess.CompletedProcess(argv, code, out, "")

    def endpoint(handle: Any, node: str, iface: Any = None) -> Endpoint:
        return Endpoint(node, "rxe0", "rxe", 1, iface.address, iface.name)

    monkeypatch.setattr(storage, "endpoint", endpoint)
    monkeypatch.setattr(storage.counters, "read_all", lambda h, nodes, timeout: {
        n: None for n in nodes})
    monkeypatch.setattr(storage, "snapshot", lambda *a: "state")
    stopped = SimpleNamespace(name="rxe1", state="stopped", reason="qemu gone")
    nodes = [stopped] if replies.get("setup", (0,))[0] == 255 else []
    lab = load_lab(ROOT / "topologies" / topology)
    handle = SimpleNamespace(lab=lab, run=run, provider=SimpleNamespace(nodes=lambda: nodes),
                             node_names=lambda: [n.name for n in lab.nodes])
    return handle, steps


def test_a_passed_run_s_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    handle, steps = _fake_lab(monkeypatch, {
        "client": (0, output("nfs-rdma.client.rxe.txt")),
        "setup": (0, output("nfs-rdma.server.rxe.txt"))})
    result = run_storage(handle, WORKLOADS[("nfs", "rdma")], "rxe1", "rxe2", {})
    assert result.status == "passed", result.reason
    assert steps == ["cleanup rxe2", "setup rxe1", "client rxe2", "teardown rxe1"]
    assert result.figures["verified"] is True and result.key_value() == 1.86
    assert "portlist: rdma 20049" in result.server_output


def test_a_failed_client_is_cleaned_up_and_the_target_removed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    handle, steps = _fake_lab(monkeypatch, {
        "client": (1, output("nvmeof-rdma.client.server-stopped.txt"))})
    result = run_storage(handle, WORKLOADS[("nvmeof", "rdma")], "rxe1", "rxe2", {})
    assert result.status == "failed"
    assert result.reason == "the client on rxe2 exited with 1 at 'write'"
    assert steps == ["cleanup rxe2", "setup rxe1", "client rxe2", "cleanup rxe2",
                     "teardown rxe1"]
    assert result.diagnostics == {"rxe1": "state", "rxe2": "state"}


def test_a_client_that_ran_into_its_bound_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    handle, _ = _fake_lab(monkeypatch, {"client": (124, "labctl: device /dev/nvme0n1\n")})
    result = run_storage(handle, WORKLOADS[("nvmeof", "tcp")], "rxe1", "rxe2",
                         {"timeout": 20.0})
    assert result.reason == "the client on rxe2 exited with 124 (timed out)"


def test_a_server_that_cannot_be_reached_fails_the_setup_and_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    handle, steps = _fake_lab(monkeypatch, {"setup": (255, "ssh: connect to host 127.0.0.1 "
                                                      "port 57035: Connection refused")})
    result = run_storage(handle, WORKLOADS[("nvmeof", "rdma")], "rxe1", "rxe2", {})
    assert result.status == "failed"
    assert result.reason == ("target setup on rxe1 exited with 255; node rxe1 is stopped "
                             "(qemu gone)")
    assert steps == ["cleanup rxe2", "setup rxe1", "teardown rxe1"]  # no client step


def test_rdma_between_rxe_and_siw_is_skipped_tcp_is_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    handle, steps = _fake_lab(monkeypatch, {"client": (0, output("nvmeof-tcp.client.siw.txt"))})

    def endpoint(h: Any, node: str, iface: Any = None) -> Endpoint:
        kind = "siw" if node.startswith("siw") else "rxe"
        return Endpoint(node, f"{kind}0", kind, None, iface.address, iface.name)

    monkeypatch.setattr(storage, "endpoint", endpoint)
    skipped = run_storage(handle, WORKLOADS[("nvmeof", "rdma")], "rxe1", "siw1", {})
    assert skipped.status == "skipped" and "cannot talk" in skipped.reason and steps == []
    passed = run_storage(handle, WORKLOADS[("nvmeof", "tcp")], "rxe1", "siw1", {})
    assert passed.status == "passed" and passed.figures["verified"] is True


def test_a_node_without_the_package_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    handle, steps = _fake_lab(monkeypatch, {}, topology="two-node.yaml")
    with pytest.raises(UsageError, match="nvme-cli"):
        run_storage(handle, WORKLOADS[("nvmeof", "rdma")], "node1", "node2", {})
    assert steps == []


def test_an_unknown_node_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    handle, steps = _fake_lab(monkeypatch, {})
    with pytest.raises(UsageError, match="has no node 'rxe9'"):
        run_storage(handle, WORKLOADS[("nfs", "tcp")], "rxe1", "rxe9", {})
    assert steps == []


def test_bytes_that_differ_fail_the_run_and_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = output("nfs-rdma.client.siw.txt").splitlines()
    sha = next(i for i, line in enumerate(lines) if line.startswith("labctl: sha256 "))
    lines[sha + 1] = "labctl: verified no"
    handle, steps = _fake_lab(monkeypatch, {"client": (1, "\n".join(lines))})
    result = run_storage(handle, WORKLOADS[("nfs", "rdma")], "siw1", "siw2", {})
    assert result.status == "failed" and result.figures["verified"] is False
    assert result.reason == "the bytes read back differ from those written"
    assert steps[-1] == "teardown siw1"
