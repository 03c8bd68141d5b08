"""Seeing what ran: `run --show-output` prints both programs' output on success too,
`labctl logs NODE` prints a node's console log (and follows it), and `--debug` prints each
host command labctl starts."""

from __future__ import annotations

import dataclasses
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from labctl.cli import debug, logs
from labctl.cli import run as run_cli
from labctl.providers.docker import DockerProvider
from labctl.runners.execute import RunResult
from labctl.runners.request import RunRequest
from labctl.store.labdir import LabDir
from labctl.store.state import LabState, Phase
from labctl.topology.load import load_lab
from tests.unit.clirun import run_main

REPO = Path(__file__).resolve().parents[2]
LAB = "ut-see"
# What ibv_rc_pingpong printed in a live two-node qemu lab (server, then client).
SERVER_OUT = ("  local address:  LID 0x0000, QPN 0x000011, PSN 0xe85f25, GID ::ffff:10.77.1.1\n"
              "8192000 bytes in 27.53 seconds = 2.38 Mbit/sec\n"
              "1000 iters in 27.53 seconds = 27533.91 usec/iter\n")
CLIENT_OUT = ("  local address:  LID 0x0000, QPN 0x000011, PSN 0x96a193, GID ::ffff:10.77.1.2\n"
              "8192000 bytes in 27.50 seconds = 2.38 Mbit/sec\n"
              "1000 iters in 27.50 seconds = 27504.68 usec/iter\n")


def _result(status: str = "passed", reason: str = "") -> RunResult:
    return RunResult(example="pingpong", variant="rc", server="node1", client="node2",
                     status=status, reason=reason,  # type: ignore[arg-type]
                     figures={"usec_per_iter": 27504.68}, key_figure="usec_per_iter",
                     server_argv=["ibv_rc_pingpong", "-d", "rxe0", "-g", "1"],
                     client_argv=["ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "10.77.1.1"],
                     server_output=SERVER_OUT, client_output=CLIENT_OUT)


@pytest.fixture
def fake_run(monkeypatch: pytest.MonkeyPatch) -> list[RunResult]:
    """`run pingpong` without a lab: the pair chosen, each run the next of the results."""
    results: list[RunResult] = []
    monkeypatch.setattr(RunRequest, "open", lambda self: (None, [("node1", "node2")]))
    monkeypatch.setattr(run_cli, "captured_runner",
                        lambda capture, capture_dir, **kw: lambda *a: results.pop(0))
    return results


def test_show_output_prints_both_programs_after_the_table(
        fake_run: list[RunResult], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake_run.append(_result())
    code, out, err = run_main(monkeypatch, capsys, "run", "pingpong", "--show-output")
    assert code == 0, err
    table_end = out.index("27504.68 usec/iter │")
    server = out.index("--- server node1: ibv_rc_pingpong -d rxe0 -g 1\n")
    client = out.index("--- client node2: ibv_rc_pingpong -d rxe0 -g 1 10.77.1.1\n")
    assert table_end < server < client
    assert "1000 iters in 27.53 seconds = 27533.91 usec/iter" in out[server:client]
    assert out.rstrip().endswith("1000 iters in 27.50 seconds = 27504.68 usec/iter")
    assert "=== pingpong rc node1 -> node2: passed" in out


def test_without_show_output_a_passed_run_prints_the_table_only(
        fake_run: list[RunResult], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake_run.append(_result())
    code, out, err = run_main(monkeypatch, capsys, "run", "pingpong")
    assert code == 0, err
    assert "usec/iter" in out and "--- server" not in out and "local address" not in out


def test_show_output_of_a_failed_run_prints_its_output_once(
        fake_run: list[RunResult], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake_run.append(_result("failed", "client exited 1"))
    code, out, err = run_main(monkeypatch, capsys, "run", "pingpong", "--show-output")
    assert code == 1
    assert "--- server node1" not in out  # a failure's output goes with its details
    assert err.count("--- server node1: ibv_rc_pingpong") == 1
    assert "pingpong rc failed" in err


def test_show_output_with_json_prints_one_document(
        fake_run: list[RunResult], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import json

    fake_run.append(_result())
    code, out, _ = run_main(monkeypatch, capsys, "run", "pingpong", "--json", "--show-output")
    assert code == 0
    # one document (the records under one key); the record holds the outputs
    assert json.loads(out)["records"][0]["client_output"] == CLIENT_OUT


def test_every_pair_command_takes_show_output_but_ucx_info() -> None:
    from typer.testing import CliRunner

    from labctl.cli.app import app

    runner = CliRunner()
    for command in ("pingpong", "rping", "all", "nvmeof", "ucx", "mpi", "custom"):
        help_text = runner.invoke(app, ["run", command, "--help"],
                                  env={"COLUMNS": "200"}).output
        assert "--show-output" in help_text, command
    assert "--show-output" not in runner.invoke(app, ["run", "ucx-info", "--help"],
                                                env={"COLUMNS": "200"}).output


# --- labctl logs ---------------------------------------------------------------------------


def _lab(provider: str = "qemu") -> LabDir:
    lab = dataclasses.replace(load_lab(REPO / "topologies" / "two-node.yaml"), name=LAB,
                              provider=provider)  # type: ignore[arg-type]
    labdir = LabDir(LAB)
    labdir.create(lab)
    labdir.save_state(LabState(provider=provider, phase=Phase.UP))  # type: ignore[arg-type]
    return labdir


def _console(labdir: LabDir, text: bytes) -> Path:
    path = labdir.node_dir("node1") / "console.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text)
    return path


def test_logs_prints_the_last_lines_of_the_console(
        state_root: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    labdir = _lab()
    _console(labdir, b"".join(b"labctl: stage %d [t=%d.0]\r\n" % (i, i) for i in range(200)))
    code, out, err = run_main(monkeypatch, capsys, "logs", "node1", "--lines", "3")
    assert code == 0, err
    assert out == ("labctl: stage 197 [t=197.0]\nlabctl: stage 198 [t=198.0]\n"
                   "labctl: stage 199 [t=199.0]\n")
    code, out, _ = run_main(monkeypatch, capsys, "logs", "node1", "--lab", LAB)
    assert code == 0 and len(out.splitlines()) == logs.DEFAULT_LINES


def test_logs_shows_a_guests_escapes_as_text(
        state_root: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _console(_lab(), b"\x1b[0;32m  OK  \x1b[0m Started\n\x1b]0;title\x07\xff\n")
    code, out, _ = run_main(monkeypatch, capsys, "logs", "node1")
    assert code == 0
    assert out == "\\x1b[0;32m  OK  \\x1b[0m Started\n\\x1b]0;title\\x07\ufffd\n"
    assert "\x1b" not in out


def test_logs_reads_a_huge_console_by_its_end(
        state_root: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = _console(_lab(), b"")
    with path.open("wb") as f:  # 64 MiB, sparse: its end only is read
        f.truncate(64 << 20)
        f.seek(64 << 20)
        f.write(b"\nlast line\n")
    code, out, _ = run_main(monkeypatch, capsys, "logs", "node1", "--lines", "1")
    assert code == 0 and out == "last line\n"


@pytest.mark.parametrize(("args", "message"), [
    (["logs", "node9"], "error: lab ut-see has no node 'node9'"),
    (["logs", "../x"], "error: bad node name '../x'"),
    (["logs", "node1", "--lines", "0"], "error: --lines must be a whole number from 1 to"),
    (["logs", "node1", "--lines", "many"], "error: invalid value for '--lines'"),
    (["logs", "node1", "--lab", "nolab"], "error: no lab named 'nolab' is up"),
])
def test_logs_bad_input_exits_2_with_a_hint(
        args: list[str], message: str, state_root: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _console(_lab(), b"boot\n")
    code, out, err = run_main(monkeypatch, capsys, *args)
    assert code == 2, (out, err)
    assert err.startswith(message), err
    assert "\nhint: " in err and out == ""


def test_logs_before_the_console_exists_and_of_a_symlink(
        state_root: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    labdir = _lab()
    code, _, err = run_main(monkeypatch, capsys, "logs", "node1")
    assert code == 1 and "error: node node1 has no console log yet" in err
    path = labdir.node_dir("node1") / "console.log"
    path.parent.mkdir(parents=True)
    path.symlink_to("/etc/shadow")  # state files are data: never followed out of the lab
    code, out, err = run_main(monkeypatch, capsys, "logs", "node1")
    assert code == 1 and out == ""
    assert "symbolic link (not followed)" in err and "\nhint: " in err


def test_follow_prints_appended_lines_and_a_new_console_after_a_restart(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node_dir = tmp_path / "node1"
    node_dir.mkdir()
    path = node_dir / "console.log"
    path.write_bytes(b"old boot\n")
    from labctl import bounded

    _, mark = bounded.read_since(path, None)

    def guest() -> None:
        time.sleep(0.05)
        with path.open("ab") as f:
            f.write(b"appended\npart")
        time.sleep(0.05)
        with path.open("ab") as f:
            f.write(b"ial line\n")
        time.sleep(0.05)
        path.replace(node_dir / "console.log.1")  # a restart: a new console log
        path.write_bytes(b"new boot\n")
        time.sleep(0.05)
        (node_dir / "console.log.1").unlink()
        path.unlink()
        node_dir.rmdir()  # `down`: the follow ends

    writer = threading.Thread(target=guest)
    writer.start()
    logs.follow_file(path, mark, poll=0.01)
    writer.join()
    out, err = capsys.readouterr()
    assert out == "appended\npartial line\nnew boot\n"
    assert "lab removed" in err


def test_logs_follow_ends_quietly_on_ctrl_c(state_root: Path) -> None:
    labdir = _lab()
    _console(labdir, b"booted\n")
    proc = subprocess.Popen([sys.executable, "-m", "labctl", "logs", "node1", "--follow"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "LABCTL_STATE_DIR": str(state_root)})
    assert proc.stdout is not None
    assert proc.stdout.readline() == "booted\n"
    with (labdir.node_dir("node1") / "console.log").open("a") as f:
        f.write("later\n")
    assert proc.stdout.readline() == "later\n"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert err == "" and out == ""


def test_logs_of_a_container_runs_docker_logs(
        state_root: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _lab("docker")
    asked: list[dict[str, Any]] = []

    def log_argv(self: DockerProvider, node: str, *, lines: int, follow: bool) -> list[str]:
        asked.append({"node": node, "lines": lines, "follow": follow})
        # a process that prints as `docker logs` does: the container's stdout and stderr
        return [sys.executable, "-c", "import sys; print('init: up'); "
                "print('rxe0 ACTIVE', file=sys.stderr)"]

    monkeypatch.setattr(DockerProvider, "log_argv", log_argv)
    code, out, err = run_main(monkeypatch, capsys, "logs", "node2", "--lines", "7")
    assert code == 0, err
    assert out == "init: up\nrxe0 ACTIVE\n"
    code, out, err = run_main(monkeypatch, capsys, "logs", "node2", "--follow")
    assert code == 0 and out == "init: up\nrxe0 ACTIVE\n"
    assert asked == [{"node": "node2", "lines": 7, "follow": False},
                     {"node": "node2", "lines": 50, "follow": True}]


def test_docker_logs_argv() -> None:
    provider = DockerProvider.__new__(DockerProvider)
    provider.lab = dataclasses.replace(load_lab(REPO / "topologies" / "two-node.yaml"),
                                       name=LAB)
    provider._base_url = lambda node: "unix:///run/docker.sock"  # type: ignore[method-assign]
    argv = provider.log_argv("node1", lines=20, follow=True)
    assert argv[:6] == ["docker", "-H", "unix:///run/docker.sock", "logs", "--tail", "20"]
    assert argv[6] == "--follow" and len(argv) == 8 and argv[7].endswith("node1")
    assert "--follow" not in provider.log_argv("node1", lines=20, follow=False)


def test_logs_of_a_docker_container_that_is_gone_fails_with_a_hint(
        state_root: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _lab("docker")
    monkeypatch.setattr(DockerProvider, "log_argv", lambda self, node, **kw: [
        sys.executable, "-c", "import sys; sys.exit('Error: No such container: x')"])
    code, out, err = run_main(monkeypatch, capsys, "logs", "node1")
    assert code == 1 and out == ""
    assert "error: cannot read node node1's log: Error: No such container: x" in err
    assert "hint: " in err


def test_logs_of_a_vagrant_node_without_a_console_says_what_to_use(
        state_root: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _lab("vagrant")
    code, _, err = run_main(monkeypatch, capsys, "logs", "node1", "--lines", "30")
    assert code == 2
    assert "error: lab ut-see keeps no console log for node node1" in err
    assert "hint: `labctl exec node1 -- journalctl -b --no-pager -n 30`" in err


# --- --debug ---------------------------------------------------------------------------


@pytest.fixture
def debug_off() -> Any:
    yield
    debug.enable(False)


def test_debug_prints_each_host_command_shell_quoted(
        debug_off: None, capsys: pytest.CaptureFixture[str]) -> None:
    debug.enable()
    argv = [sys.executable, "-c", "print('it ran')", "two words", "it's"]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    err = capsys.readouterr().err
    assert err == "debug: $ " + shlex.join(argv) + "\n"
    assert "'two words'" in err
    assert shlex.split(err.removeprefix("debug: $ ")) == argv
    debug.enable(False)
    subprocess.run(["true"], check=True)
    assert capsys.readouterr().err == ""


def test_debug_option_and_env_var_print_the_commands_a_command_runs(
        state_root: Path, monkeypatch: pytest.MonkeyPatch, debug_off: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    _lab("docker")
    monkeypatch.setattr(DockerProvider, "log_argv", lambda self, node, **kw: [
        "docker", "-H", "unix:///x y", "logs", "--tail", "5", "labctl-ut-see-node1"])
    code, _, err = run_main(monkeypatch, capsys, "--debug", "logs", "node1")
    assert "debug: $ docker -H 'unix:///x y' logs --tail 5 labctl-ut-see-node1\n" in err
    assert code == 1  # no docker here, or no such container: said, not a traceback
    debug.enable(False)
    code, _, err = run_main(monkeypatch, capsys, "logs", "node1")
    assert "debug:" not in err
    monkeypatch.setenv("LABCTL_DEBUG", "1")
    code, _, err = run_main(monkeypatch, capsys, "logs", "node1")
    assert "debug: $ docker -H" in err
    debug.enable(False)
    monkeypatch.setenv("LABCTL_DEBUG", "0")
    code, _, err = run_main(monkeypatch, capsys, "logs", "node1")
    assert "debug:" not in err


def test_debug_sees_exec_handing_over_to_the_node(debug_off: None) -> None:
    """`labctl exec` replaces itself with ssh/docker (os.execvp): logged before it."""
    code = ("import os, sys; from labctl.cli import debug; debug.enable(); "
            "os.execvp('true', ['true', 'a b'])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0
    assert result.stderr == "debug: $ true 'a b'\n"
