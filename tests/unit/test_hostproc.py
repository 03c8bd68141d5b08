"""labctl.hostproc, the one way labctl runs a host program: real tiny programs, and what
a user sees when one fails (a message naming it, its stderr's end, a hint, exit 1, no
traceback)."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import pytest

from labctl import hostproc
from labctl.errors import LabctlError
from labctl.providers.docker import DockerProvider
from labctl.store.labdir import LabDir
from labctl.store.state import LabState, Phase
from labctl.topology.load import load_lab
from tests.unit.clirun import run_main

REPO = Path(__file__).resolve().parents[2]
MISSING = "labctl-no-such-tool"


def test_a_failed_program_is_named_with_its_stderr_and_a_hint() -> None:
    with pytest.raises(hostproc.HostProcessError) as caught:
        hostproc.run(["sh", "-c", "echo out; echo 'mount: /x: wrong fs type' >&2; exit 3"],
                     timeout=30)
    error = caught.value
    assert isinstance(error, LabctlError) and error.exit_code == 1
    assert error.message == ("`sh -c 'echo out; echo '\"'\"'mount: /x: wrong fs type'\"'\"' "
                             ">&2; exit 3'` failed (exit 3): mount: /x: wrong fs type")
    assert error.hint is not None and error.hint.startswith("run `sh -c")
    assert error.reason == "exit 3" and not error.timed_out and not error.missing
    assert error.result.returncode == 3 and error.result.stdout == "out\n"


def test_what_and_hint_name_the_step() -> None:
    with pytest.raises(hostproc.HostProcessError) as caught:
        hostproc.run(["sh", "-c", "echo x >&2; exit 3"], timeout=30, what="mounting rootfs.ext4",
                     hint="run labctl as root")
    assert caught.value.message == "mounting rootfs.ext4 failed (exit 3): x"
    assert caught.value.hint == "run labctl as root"


def test_check_false_returns_a_non_zero_exit() -> None:
    result = hostproc.run(["sh", "-c", "echo x >&2; exit 3"], timeout=30, check=False)
    assert (result.returncode, result.stdout, result.stderr, result.truncated) == (3, "", "x\n",
                                                                                    False)


def test_a_timeout_kills_the_program_and_raises_even_unchecked() -> None:
    started = time.monotonic()
    with pytest.raises(hostproc.HostProcessError) as caught:
        hostproc.run(["sleep", "5"], timeout=0.2, check=False)
    assert time.monotonic() - started < 4
    error = caught.value
    assert error.message == "`sleep 5` did not finish in 0.2 s"
    assert error.hint is not None and "`sleep 5`" in error.hint
    assert error.timed_out and error.reason == "timed out after 0.2 s"
    assert error.result.returncode == hostproc.TIMED_OUT
    assert error.result.stderr.endswith("(timed out after 0.2 s)")


def test_a_timeout_keeps_what_the_program_wrote() -> None:
    with pytest.raises(hostproc.HostProcessError) as caught:
        hostproc.run([sys.executable, "-c", "import sys, time; print('a', flush=True); "
                      "print('stuck here', file=sys.stderr, flush=True); time.sleep(60)"],
                     timeout=1)
    assert caught.value.result.stdout == "a\n"
    assert caught.value.message.endswith("did not finish in 1 s; its last words: stuck here")


def test_a_missing_tool_says_so_with_an_install_hint() -> None:
    with pytest.raises(hostproc.HostProcessError) as caught:
        hostproc.run([MISSING, "--flag"], timeout=30, check=False)
    error = caught.value
    assert error.message == f"{MISSING} not found on this host (needed for `{MISSING} --flag`)"
    assert error.hint == f"install {MISSING}, or put it on PATH; `labctl doctor` checks this host"
    assert error.missing and error.result.returncode == hostproc.NOT_FOUND
    with pytest.raises(hostproc.HostProcessError) as caught:
        hostproc.run([MISSING], timeout=30, missing_hint="apt-get install openssh-client")
    assert caught.value.hint == "apt-get install openssh-client"


def test_a_program_that_cannot_be_run_is_a_failure_too(tmp_path: Path) -> None:
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(hostproc.HostProcessError) as caught:
        hostproc.run([str(script)], timeout=30)
    assert caught.value.message == f"cannot run `{script}`: Permission denied"
    assert not caught.value.missing and caught.value.hint


def test_the_stderr_tail_is_bounded_and_printable() -> None:
    script = ("import sys\nfor i in range(5000): print(f'line {i}', file=sys.stderr)\n"
              "print('\\x1b]0;title\\x07 the end', file=sys.stderr); sys.exit(1)")
    with pytest.raises(hostproc.HostProcessError) as caught:
        hostproc.run([sys.executable, "-c", script], timeout=30, what="the tool")
    said = caught.value.message.removeprefix("the tool failed (exit 1): ")
    lines = said.splitlines()
    assert len(lines) == hostproc.TAIL_LINES and lines[0] == "line 4981"
    assert lines[-1] == "\\x1b]0;title\\x07 the end"  # no escape sequence reaches a terminal
    long_lines = "import sys; sys.stderr.write(('y' * 500 + '\\n') * 10); sys.exit(2)"
    with pytest.raises(hostproc.HostProcessError) as caught:
        hostproc.run([sys.executable, "-c", long_lines], timeout=30, what="the tool")
    said = caught.value.message.removeprefix("the tool failed (exit 2): ")
    assert said.startswith("…") and len(said) == hostproc.TAIL_CHARS + 1


def test_a_long_command_line_is_cut_in_messages() -> None:
    with pytest.raises(hostproc.HostProcessError) as caught:
        hostproc.run(["sh", "-c", "exit 1", "x" * 10_000], timeout=30)
    assert len(caught.value.message) < hostproc.COMMAND_CHARS + 40
    assert caught.value.message.endswith("…` failed (exit 1)")


def test_stdout_is_kept_bounded_and_flagged() -> None:
    script = "import sys; sys.stdout.write('x' * 5_000_000); sys.stderr.write('err')"
    result = hostproc.run([sys.executable, "-c", script], timeout=30, limit=1000)
    assert result.truncated and result.stdout == "x" * 1000
    assert result.stderr == "err" and result.returncode == 0


def test_input_env_cwd_and_no_capture(tmp_path: Path) -> None:
    result = hostproc.run([sys.executable, "-c", "import sys; print(sys.stdin.read()[::-1])"],
                          timeout=30, input="abc")
    assert result.stdout == "cba\n"
    result = hostproc.run(["sh", "-c", 'echo "$LABCTL_X $(pwd)"'], timeout=30,
                          env={"LABCTL_X": "y", "PATH": "/usr/bin:/bin"}, cwd=str(tmp_path))
    assert result.stdout == f"y {tmp_path}\n"
    result = hostproc.run(["sh", "-c", "echo out; echo err >&2"], timeout=30, capture=False)
    assert (result.stdout, result.stderr) == ("", "err\n")


def test_a_program_that_never_reads_its_input_still_times_out() -> None:
    started = time.monotonic()
    with pytest.raises(hostproc.HostProcessError) as caught:
        hostproc.run(["sleep", "30"], input="x" * (4 << 20), timeout=0.5)
    assert caught.value.timed_out and time.monotonic() - started < 10


def test_stderr_to_a_log_file(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with log.open("wb") as file:
        result = hostproc.run(["sh", "-c", "echo said >&2; exit 4"], timeout=30, check=False,
                              capture=False, stderr=file)
    assert result.returncode == 4 and result.stderr == ""
    assert log.read_text() == "said\n"


def test_stdin_is_never_labctl_s_terminal() -> None:
    result = hostproc.run(["sh", "-c", "cat; echo done"], timeout=30)
    assert result.stdout == "done\n"


def test_run_bytes_passes_binary_both_ways() -> None:
    data = bytes(range(256)) * 4
    assert hostproc.run_bytes(["cat"], input=data, timeout=30) == data
    with pytest.raises(hostproc.HostProcessError) as caught:
        hostproc.run_bytes(["cat"], input=data, timeout=30, limit=100, what="cat")
    assert caught.value.message == "cat printed more than 100 bytes"
    assert hostproc.run_bytes(["sh", "-c", "printf ab; exit 1"], timeout=30, check=False) == b"ab"


# --- what a user sees ------------------------------------------------------------------

LAB = "hostproc"


def _docker_lab() -> None:
    lab = dataclasses.replace(load_lab(REPO / "topologies" / "two-node.yaml"), name=LAB,
                              provider="docker")
    labdir = LabDir(LAB)
    labdir.create(lab)
    labdir.save_state(LabState(provider="docker", phase=Phase.UP))


@pytest.mark.parametrize(("argv", "said", "hint"), [
    ([MISSING, "logs", "node1"],
     f"error: {MISSING} not found on this host (needed for reading node node1's log)",
     f"hint: install {MISSING}, or put it on PATH"),
    (["sleep", "5"], "error: reading node node1's log did not finish in 0.2 s",
     "hint: `labctl doctor` checks this host"),
])
def test_a_failed_host_program_reaches_the_user_as_an_error_and_a_hint(
        argv: list[str], said: str, hint: str, state_root: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`labctl logs` of a container runs the engine's client on this host: a client that
    is not installed or hangs is an error line and a hint, exit 1, never a traceback."""
    _docker_lab()
    monkeypatch.setattr(DockerProvider, "log_argv", lambda self, node, **kw: argv)
    real_run = hostproc.run
    monkeypatch.setattr(hostproc, "run", lambda argv, **kw: real_run(
        argv, **{**kw, "timeout": min(kw["timeout"], 0.2)}))
    code, out, err = run_main(monkeypatch, capsys, "logs", "node1", "--lab", LAB)
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[0] == said and lines[1].startswith(hint) and len(lines) == 2
    assert "Traceback" not in err and "HostProcessError" not in err


def test_a_checked_failure_reaches_the_cli_without_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A checked run that fails anywhere under a command ends it with exit 1."""
    from labctl.cli import version

    def failing() -> str:
        hostproc.run(["sh", "-c", "echo 'qemu-img: Could not open x' >&2; exit 3"],
                     timeout=30, what="qemu-img info", hint="see docs/vagrant.md")
        raise AssertionError("not reached")

    monkeypatch.setattr(version, "labctl_version", failing)
    code, out, err = run_main(monkeypatch, capsys, "version")
    assert code == 1 and out == ""
    assert err.splitlines() == ["error: qemu-img info failed (exit 3): qemu-img: Could not "
                                "open x", "hint: see docs/vagrant.md"]
