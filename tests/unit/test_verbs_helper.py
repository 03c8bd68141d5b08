"""The inspector's node-side helper (labctl/verbs/helper.py): its protocol, a real helper
process on a unix socket in a temporary directory, and the client's fallback to running
the command itself. The helper's children run devinfo on recorded devices (the same
records and C outputs as test_verbs_format.py), so what comes back must be the C bytes."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from labctl.verbs import __main__ as verbs_main
from labctl.verbs import devices, devinfo, helper
from labctl.verbs.records import Snapshot

RECORDS = Path(__file__).parent / "verbs_records"


# ----------------------------------------------------------------------------- protocol
def test_request_round_trip_keeps_bytes_and_environment() -> None:
    argv = ["devinfo", "-d", "rxe0", "--ib-port=1", "", os.fsdecode(b"dev\xff")]
    env = {"POSIXLY_CORRECT": "1", "EMPTY": "", "WITH_EQ": "a=b"}
    assert helper.decode_request(helper.encode_request(argv, env)) == (argv, env)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"LVH9\x001\x00devinfo\x00", "bad magic"),
        (b"LVH1\x001\x00devinfo", "truncated"),
        (b"LVH1\x003\x00devinfo\x00", "bad argument count"),
        (b"LVH1\x000\x00", "bad argument count"),
        (b"LVH1\x00x\x00devinfo\x00", "bad argument count"),
        (b"LVH1\x001\x00devinfo\x00NOEQUALS\x00", "bad environment item"),
    ],
)
def test_bad_requests_are_refused(data: bytes, why: str) -> None:
    with pytest.raises(helper.ProtocolError, match=why):
        helper.decode_request(data)


def test_nul_in_an_argument_cannot_be_sent() -> None:
    with pytest.raises(helper.ProtocolError):
        helper.encode_request(["devinfo", "a\0b"], {})


def test_replies() -> None:
    assert helper.decode_reply(b"R 0\n") == 0
    assert helper.decode_reply(b"R 255\n") == 255
    assert helper.decode_reply(b"F not a helper command\n") is None
    for bad in (b"R x\n", b"R 1", b"hello"):
        with pytest.raises(helper.ProtocolError):
            helper.decode_reply(bad)


# ------------------------------------------------------------------------- no helper
def test_no_socket_means_run_it_here(tmp_path: Path) -> None:
    assert helper.call(["devinfo"], path=str(tmp_path / "none.sock")) is None


def test_a_dead_helpers_socket_means_run_it_here(tmp_path: Path) -> None:
    path = tmp_path / "dead.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()  # the file stays, nobody listens: ECONNREFUSED
    assert path.exists()
    assert helper.call(["devinfo"], path=str(path)) is None


# ----------------------------------------------------------------------- live helper
def _recorded(name: str) -> Callable[[list[str]], int]:
    snap = Snapshot.from_json((RECORDS / f"{name}.json").read_text())

    def run(argv: list[str]) -> int:
        if argv[0] == "crash":
            raise RuntimeError("boom in the child")
        if argv[0] == "vanish":
            os._exit(7)  # dies without a reply
        if argv[0] == "env":
            sys.stdout.write(json.dumps(dict(os.environ)))
            return 3
        if argv[0] == "devices":
            return devices.main(argv, snap)
        return devinfo.main(argv, source=lambda *_a, **_k: snap)

    return run


def _start(path: Path, run: Callable[[list[str]], int]) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            helper.serve(str(path), run=run)
        finally:
            os._exit(0)
    deadline = time.monotonic() + 30
    while not path.exists():
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("the helper did not listen within 30 s")
        time.sleep(0.01)
    return pid


@contextmanager
def _serving(path: Path, *extra: str,
             run: Callable[[list[str]], int] | None = None) -> Iterator[None]:
    """A helper on `path` serving the recorded rxe node (or running `run`); it also takes
    the test dispatcher's `extra` commands (crash, vanish), which the real command list
    leaves out."""
    path.unlink(missing_ok=True)  # a stopped helper's socket stays behind
    old = helper.COMMANDS
    helper.COMMANDS = (*old, *extra)
    try:
        pid = _start(path, run or _recorded("rxe-node1"))
    finally:
        helper.COMMANDS = old
    try:
        yield
    finally:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "run" / "verbs.sock"
    with _serving(path):
        yield path


def _call(path: Path, tmp_path: Path, argv: list[str],
          env: dict[str, str] | None = None) -> tuple[int | None, str, str]:
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("wb") as fo, err.open("wb") as fe:
        status = helper.call(argv, path=str(path), fds=(fo.fileno(), fe.fileno()), env=env)
    return status, out.read_text(), err.read_text()


def _cases(name: str) -> dict[str, dict[str, object]]:
    cases: dict[str, dict[str, object]] = json.loads(
        (RECORDS / name / "cases.json").read_text())
    return {k: v for k, v in cases.items() if v["tool"] == "devinfo"}


def test_helper_prints_the_c_tools_bytes(served: Path, tmp_path: Path) -> None:
    cases = _cases("rxe-node1")
    assert "devinfo-v" in cases
    for case, spec in cases.items():
        args = spec["args"]
        assert isinstance(args, list)
        status, out, _ = _call(served, tmp_path, ["devinfo", *args])
        assert out == (RECORDS / "rxe-node1" / f"{case}.out").read_text(), case
        assert status == spec["rc"], case


def test_socket_is_root_only(served: Path) -> None:
    assert served.stat().st_mode & 0o077 == 0
    assert served.parent.stat().st_mode & 0o077 == 0


def test_errors_come_back_on_stderr_with_the_status(served: Path, tmp_path: Path) -> None:
    status, out, err = _call(served, tmp_path, ["devinfo", "-d", "nosuchdev9"])
    assert (status, out, err) == (255, "", "IB device 'nosuchdev9' wasn't found\n")


def test_environment_is_forwarded(tmp_path: Path) -> None:
    path = tmp_path / "env.sock"
    with _serving(path, "env"):  # the forked helper inherits the extended list
        status, out, _ = _call(path, tmp_path, ["env"], env={"POSIXLY_CORRECT": "1"})
    assert status == 3
    assert json.loads(out) == {"POSIXLY_CORRECT": "1"}


def test_posixly_correct_changes_parsing_in_the_helper(served: Path, tmp_path: Path) -> None:
    """getopt permutes `x -l` (a list, exit 0) unless POSIXLY_CORRECT: then -l is an
    operand and devinfo prints every device (exit 0 too, but another output)."""
    permuted = _call(served, tmp_path, ["devinfo", "x", "-l"], env={})
    posix = _call(served, tmp_path, ["devinfo", "x", "-l"], env={"POSIXLY_CORRECT": "1"})
    listing = (RECORDS / "rxe-node1" / "devinfo-l.out").read_text()
    assert permuted[1] == listing
    assert posix[1] != listing and posix[1].startswith("hca_id:")


def test_commands_outside_the_helper_are_refused(served: Path, tmp_path: Path) -> None:
    assert _call(served, tmp_path, ["asyncwatch"])[0] is None


def test_a_request_over_the_limit_is_refused_and_run_here(served: Path,
                                                          tmp_path: Path) -> None:
    # The helper answers "F" and closes before reading the rest: the client sees the reply
    # or a reset, and either way runs the command itself.
    big = {f"BIG{i}": "x" * (120 << 10) for i in range(10)}
    assert sum(map(len, big.values())) > helper.MAX_REQUEST
    assert _call(served, tmp_path, ["devinfo", "-l"], env=big)[0] is None
    assert _call(served, tmp_path, ["devinfo", "-l"], env={})[0] == 0  # and it still serves


def test_a_crash_in_the_child_is_reported_and_the_helper_lives(
    tmp_path: Path
) -> None:
    path = tmp_path / "crash.sock"
    with _serving(path, "crash", "vanish"):
        status, out, err = _call(path, tmp_path, ["crash"])
        assert status == 1 and out == ""
        assert "RuntimeError: boom in the child" in err
        status, out, err = _call(path, tmp_path, ["vanish"])
        assert status == 1 and out == ""
        status, out, err = _call(path, tmp_path, ["devinfo", "-l"])
        assert status == 0 and out == (RECORDS / "rxe-node1" / "devinfo-l.out").read_text()


def test_a_vanished_child_is_an_error_not_a_second_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "vanish.sock"
    with _serving(path, "vanish"):
        status, out, _ = _call(path, tmp_path, ["vanish"])
    assert (status, out) == (1, "")
    assert "without an exit status" in capsys.readouterr().err


# ------------------------------------------------------------------- labctl.verbs main
def test_main_runs_directly_without_a_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(helper, "SOCKET", str(tmp_path / "absent.sock"))
    assert verbs_main.main(["labctl.verbs", "devinfo", "-x"]) == 255
    captured = capsys.readouterr()
    assert captured.out == devinfo.usage()
    assert "invalid option -- 'x'" in captured.err


def test_main_uses_the_helper_when_it_listens(
    served: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(helper, "SOCKET", str(served))
    calls: list[list[str]] = []
    real = helper.call

    def spy(argv: list[str], *a: object, **k: object) -> int | None:
        calls.append(argv)
        return real(argv, fds=(os.open(os.devnull, os.O_WRONLY),) * 2)  # type: ignore[return-value]

    monkeypatch.setattr(helper, "call", spy)
    assert verbs_main.main(["labctl.verbs", "devinfo", "-d", "nosuchdev9"]) == 255
    assert calls == [["devinfo", "-d", "nosuchdev9"]]


def test_direct_env_skips_the_helper(
    served: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(helper, "SOCKET", str(served))
    monkeypatch.setenv(helper.DIRECT_ENV, "1")
    monkeypatch.setattr(helper, "call", lambda *a, **k: pytest.fail("helper used"))
    assert verbs_main.main(["labctl.verbs", "devinfo", "-x"]) == 255
    assert capsys.readouterr().out == devinfo.usage()


def test_client_path_imports_no_socket_module() -> None:
    """The client is on every run's critical path: `socket` (enums) costs ~0.2 s under TCG."""
    import subprocess

    code = ("import sys; from labctl.verbs import helper; "
            "helper.call(['devinfo'], path='/nonexistent/x.sock'); "
            "print('socket' in sys.modules, 'typing' in sys.modules)")
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONPATH": str(RECORDS.parents[2])})
    assert proc.stdout.split() == ["False", "False"]


def test_helper_refuses_to_serve_when_told_direct(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(helper.DIRECT_ENV, "1")
    assert helper.main(["helper", "/nonexistent/x.sock"], verbs_main.dispatch) == 2
    assert "not serving" in capsys.readouterr().err


def test_warm_up_never_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without devices or pyverbs the helper still starts: the children report the error."""
    calls: list[dict[str, object]] = []

    def broken(*_a: object, **k: object) -> Snapshot:
        calls.append(k)
        raise ImportError("No module named 'pyverbs'")

    monkeypatch.setattr(devinfo, "capture", broken)
    helper.warm_up()  # returns: the capture's error is the children's to report
    assert calls == [{"verbose": True}]


def test_lean_entry_point_is_the_module() -> None:
    """labctl's calls into nodes (`python3 -S -c NODE_ENTRY ...`) act as `-m labctl.verbs`:
    without a helper they run directly, loading site only then."""
    import subprocess

    from labctl.cli.inspect import NODE_ENTRY, node_argv

    assert node_argv("asyncwatch", "-d")[-4:] == ["-c", NODE_ENTRY, "asyncwatch", "-d"]
    assert node_argv("capture")[-2:] == [NODE_ENTRY, "capture"]
    # the node commands (a compiled client in labctl's node image, else this same entry)
    assert node_argv("devinfo", "-v") == ["labctl-devinfo", "-v"]
    assert node_argv("devices") == ["labctl-devices"]
    env = {**os.environ, "PYTHONPATH": str(RECORDS.parents[2])}
    lean = subprocess.run([sys.executable, "-S", "-c", NODE_ENTRY, "devinfo", "-x"],
                          capture_output=True, text=True, env=env, check=False)
    module = subprocess.run([sys.executable, "-m", "labctl.verbs", "devinfo", "-x"],
                            capture_output=True, text=True, env=env, check=False)
    assert (lean.returncode, lean.stdout, lean.stderr) == (
        module.returncode, module.stdout, module.stderr)
    assert lean.returncode == 255 and lean.stdout == devinfo.usage()


def test_one_helper_per_socket(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    """labctl starts the helper after every bring-up (repairs too): a second start must not
    replace the first one's socket, and it returns before importing anything."""
    path = str(tmp_path / "run" / "verbs.sock")
    held = helper.single_instance_lock(path)
    assert held is not None
    assert helper.single_instance_lock(path) is None
    monkeypatch.setattr(helper, "preload", lambda: pytest.fail("a second helper imported"))
    assert helper.main(["helper", path], verbs_main.dispatch) == 0
    assert "one already serves" in capsys.readouterr().err
    os.close(held)  # the first helper ends: the next start takes over
    again = helper.single_instance_lock(path)
    assert again is not None
    os.close(again)


# ----------------------------------------------------------- the compiled client (C)
# labctl/images/verbs-client.c is labctl-devinfo and labctl-devices in the node image.
# Built here with the host's cc, with the socket and fallback paths of a temporary
# directory, and run against a real helper serving recorded devices.
CLIENT_SOURCE = Path(__file__).parents[2] / "labctl/images/verbs-client.c"
FALLBACK = "#!/bin/sh\necho \"fallback $0 $*\"\nexit 5\n"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with bin/labctl-devinfo and bin/labctl-devices (links to the client),
    lib/ (the fallback wrappers: they say they ran) and run/ (the helper's socket)."""
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler on this machine (scripts/setup.sh installs gcc)")
    root = tmp_path_factory.mktemp("client")
    for sub in ("bin", "lib", "run"):
        (root / sub).mkdir()
    binary = root / "lib" / "labctl-verbs-client"
    subprocess.run(
        [cc, "-O2", "-Wall", "-Wextra", "-Werror", f'-DSOCKET_PATH="{root}/run/verbs.sock"',
         f'-DFALLBACK_DIR="{root}/lib"', "-o", str(binary), str(CLIENT_SOURCE)],
        check=True, capture_output=True, text=True,
    )
    for tool in ("devinfo", "devices"):
        (root / "bin" / f"labctl-{tool}").symlink_to(binary)
        (root / "lib" / f"labctl-{tool}").write_text(FALLBACK)
        (root / "lib" / f"labctl-{tool}").chmod(0o755)
    return root


def _run_client(client: Path, tool: str, *args: str,
                env: dict[str, str] | None = None) -> tuple[int, str, str]:
    import subprocess

    proc = subprocess.run([str(client / "bin" / f"labctl-{tool}"), *args], capture_output=True,
                          text=True, timeout=30, env=env if env is not None else {})
    return proc.returncode, proc.stdout, proc.stderr


def test_compiled_client_prints_the_c_tools_bytes_and_status(client: Path) -> None:
    cases = json.loads((RECORDS / "rxe-node1" / "cases.json").read_text())
    assert {spec["tool"] for spec in cases.values()} == {"devinfo", "devices"}
    with _serving(client / "run" / "verbs.sock"):
        for case, spec in cases.items():
            status, out, err = _run_client(client, spec["tool"], *spec["args"])
            assert out == (RECORDS / "rxe-node1" / f"{case}.out").read_text(), case
            assert status == spec["rc"], (case, err)
            assert "fallback" not in out


def test_compiled_client_forwards_the_environment(client: Path) -> None:
    # POSIXLY_CORRECT stops getopt at the first operand, as in the C tool: "-l" is then
    # not an option, and the output differs from the permuted parse.
    with _serving(client / "run" / "verbs.sock"):
        permuted = _run_client(client, "devinfo", "x", "-l")
        posix = _run_client(client, "devinfo", "x", "-l", env={"POSIXLY_CORRECT": "1"})
    assert permuted != posix


def test_compiled_client_runs_the_python_wrapper_without_a_helper(client: Path) -> None:
    (client / "run" / "verbs.sock").unlink(missing_ok=True)
    status, out, _ = _run_client(client, "devinfo", "-v", "-d", "rxe0")
    assert (status, out) == (5, f"fallback {client}/lib/labctl-devinfo -v -d rxe0\n")


def test_compiled_client_runs_the_python_wrapper_when_told_direct(client: Path) -> None:
    with _serving(client / "run" / "verbs.sock"):
        status, out, _ = _run_client(client, "devices", env={helper.DIRECT_ENV: "1"})
    assert (status, out) == (5, f"fallback {client}/lib/labctl-devices \n")


def test_compiled_client_runs_the_python_wrapper_when_the_helper_refuses(client: Path) -> None:
    # A request over the helper's limit (an environment of 1.2 MiB) is answered "F": it
    # runs nothing, so the command still runs, the slow way.
    big = {f"BIG{i}": "x" * (120 << 10) for i in range(10)}
    with _serving(client / "run" / "verbs.sock"):
        status, out, _ = _run_client(client, "devinfo", "-l", env=big)
    assert (status, out) == (5, f"fallback {client}/lib/labctl-devinfo -l\n")


def test_compiled_client_reports_a_vanished_child_and_does_not_run_twice(client: Path) -> None:
    def vanish(_argv: list[str]) -> int:
        sys.stdout.write("half")
        sys.stdout.flush()
        os._exit(7)

    with _serving(client / "run" / "verbs.sock", run=vanish):
        status, out, err = _run_client(client, "devinfo")
    assert (status, out) == (1, "half")
    assert err == "labctl.verbs: the helper ended without an exit status\n"


def test_compiled_client_under_another_name_says_how_to_run_it(client: Path) -> None:
    import subprocess

    proc = subprocess.run([str(client / "lib" / "labctl-verbs-client")], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2
    assert "run me as labctl-devinfo or labctl-devices" in proc.stderr


# ------------------------------------------------------------------- devices that change
def test_device_signature_reads_names_creation_times_and_device_names(tmp_path: Path) -> None:
    sysfs = tmp_path / "infiniband_verbs"
    (sysfs / "uverbs0").mkdir(parents=True)
    (sysfs / "uverbs0" / "ibdev").write_text("rxe0\n")
    (sysfs / "abi_version").write_text("6\n")  # not a device
    first = helper.device_signature(str(sysfs))
    assert [(name, dev) for name, _made, dev in first] == [("uverbs0", "rxe0")]
    assert helper.device_signature(str(sysfs)) == first  # stable while nothing changes
    (sysfs / "uverbs1").mkdir()
    (sysfs / "uverbs1" / "ibdev").write_text("rxehy\n")
    assert [dev for _n, _m, dev in helper.device_signature(str(sysfs))] == ["rxe0", "rxehy"]
    (sysfs / "uverbs0" / "ibdev").write_text("renamed\n")
    assert helper.device_signature(str(sysfs))[0][2] == "renamed"
    assert helper.device_signature(str(tmp_path / "none")) == ()


def test_a_helper_whose_devices_changed_runs_nothing_and_starts_again(tmp_path: Path) -> None:
    """libibverbs lists a device found after a process's first listing at the head of its
    list: a helper started before `rdma link add` would print the devices in another order
    than a fresh C tool. So it refuses (the client runs the command itself) and restarts."""
    path = tmp_path / "run" / "verbs.sock"
    devices_file = tmp_path / "devices"
    devices_file.write_text("rxe0")
    restarted = tmp_path / "restarted"

    def on_change(socket_path: str) -> None:
        restarted.write_text(socket_path)
        os._exit(0)

    pid = os.fork()
    if pid == 0:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            helper.serve(str(path), run=_recorded("rxe-node1"), devices="rxe0",
                         signature=devices_file.read_text, on_change=on_change)
        finally:
            os._exit(0)
    try:
        deadline = time.monotonic() + 30
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _call(path, tmp_path, ["devices"])[0] == 0  # unchanged: the helper serves
        assert not restarted.exists()
        devices_file.write_text("rxe0 rxehy")
        assert _call(path, tmp_path, ["devices"])[0] is None  # "run it yourself"
        _, status = os.waitpid(pid, 0)
        pid = 0
        assert os.waitstatus_to_exitcode(status) == 0
        assert restarted.read_text() == str(path)
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
