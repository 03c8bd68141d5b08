"""The hostile corpus by class, generated per boundary: every input class below is tried at
every boundary, and a boundary is found, not listed, where it can be (every `parse_*` of
labctl.runners against every captured program output; every file `up` leaves in a lab
directory; every file of the image cache that `image list` reads), so a new parser or a
new lab file gets the whole corpus without a line here.

Classes: numbers of 5,000 digits, NaN and infinities, terminal escape sequences, rich
markup, a socket or a FIFO in place of a file, names past NAME_MAX. What must hold: no
traceback (run_main lets any exception but SystemExit through, failing the test), a
message with a hint, exit 1 or 2, valid JSON for --json, no escape sequence on the
terminal, and every case within a time bound (no hang). docs/reliability.md gives the
counts per boundary.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import math
import os
import pkgutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import labctl.runners
from labctl import bounded
from labctl.cli.safeprint import json_text
from labctl.lab.handle import LabHandle
from labctl.runners.example_spec import parse_output
from labctl.runners.examples import EXAMPLES
from labctl.runners.execute import run_example
from labctl.store.labdir import LabDir
from tests.unit.clirun import run_main
from tests.unit.standin import GOOD_STATUS, LAB, make_lab
from tests.unit.test_trust_node_replies import _replies

OUTPUTS = Path(__file__).parent / "outputs"
HUGE = "9" * 5000  # past Python's 4,300-digit int() limit
HUGE_DECIMAL = "1" + "0" * 4400 + ".5"

# --- the classes ---------------------------------------------------------------------------
NUMBER_TEXTS = [HUGE, "-" + HUGE, HUGE_DECIMAL, "1e999", "-1e999", "1e-999", "nan", "NaN",
                "inf", "-inf", "Infinity", "1.2.3", "", " ", "0x10", "1_000", "١٢٣",
                "9" * 65, "9" * 64]
JSON_NUMBERS = [HUGE, "-" + HUGE, HUGE_DECIMAL, "1e999", "-1e999", "NaN", "Infinity",
                "-Infinity"]
ESCAPES = ["\x1b[2J\x1b[H", "\x1b]0;pwned\x07", "\x1b]8;;file:///etc/passwd\x1b\\x\x1b]8;;"
           "\x1b\\", "\x9b31m", "\x1bP+q\x1b\\", "a\rb", "\x00", "\x7f", "\u202egnp.exe"]
MARKUP = ["[/]", "[/x]", "[bold", "[link=file:///etc/passwd]x[/link]", "\\[/]"]
TERMINAL_TEXTS = ESCAPES + MARKUP


def _no_escape(*texts: str) -> None:
    """Nothing printed carries a control character but newline and tab: capsys is no
    terminal, so rich writes no style codes of its own either."""
    for text in texts:
        assert bounded.printable(text) == text, repr(text[:300])


def _strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in --json output")

    return json.loads(text, parse_constant=refuse)


# --- boundary 1: the number parser itself --------------------------------------------------
@pytest.mark.parametrize("text", NUMBER_TEXTS, ids=lambda t: repr(t[:12]))
def test_the_number_parser_refuses_with_a_hint_or_gives_a_bounded_finite_number(
        text: str) -> None:
    for parse in (bounded.parse_int, bounded.parse_float):
        try:
            value = parse(text, "x")
        except bounded.NumberError as exc:
            assert exc.hint and exc.exit_code == 1 and len(exc.message) < 300
            continue
        assert math.isfinite(value) and abs(value) <= 10.0 ** bounded.MAX_NUMBER_CHARS


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=200) | st.from_regex(r"[-+]?\d{0,120}(\.\d{0,80})?(e[-+]?\d{1,6})?"))
def test_any_text_is_a_number_or_a_number_error(text: str) -> None:
    started = time.process_time()
    for parse in (bounded.parse_int, bounded.parse_float):
        try:
            value = parse(text, "x")
        except bounded.NumberError:
            continue
        assert math.isfinite(value)
    assert time.process_time() - started < 1


@pytest.mark.parametrize("number", JSON_NUMBERS, ids=lambda t: t[:12])
def test_json_from_outside_refuses_numbers_it_cannot_hold(number: str) -> None:
    for document in (number, f'{{"a": {number}}}', f"[1, {number}]"):
        with pytest.raises(bounded.BoundedError):
            bounded.loads(document)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, [1.0, math.nan],
                                   {"a": {"b": math.inf}}])
def test_json_output_is_never_nan_or_infinity(value: Any) -> None:
    from labctl.errors import LabctlError

    with pytest.raises(LabctlError) as info:
        json_text(value)
    assert info.value.hint


# --- boundary 2: what a program printed, through every parser -----------------------------
def _parsers() -> Iterator[tuple[str, Callable[[str], Any]]]:
    """Every parse_* function of labctl.runners' modules that reads a program's text into
    a record (a dict or a dataclass; parse_sizes and the like read the user's options into
    a list: UsageError is theirs)."""
    for module_info in pkgutil.iter_modules(labctl.runners.__path__):
        module = importlib.import_module(f"labctl.runners.{module_info.name}")
        for name, function in vars(module).items():
            if not (name.startswith("parse_") and inspect.isfunction(function)
                    and function.__module__ == module.__name__):
                continue
            signature = inspect.signature(function)
            returns = str(signature.return_annotation)
            if len(signature.parameters) == 1 and not returns.startswith(("list", "tuple")):
                yield f"{module_info.name}.{name}", function


PARSERS = dict(_parsers())
CAPTURED = sorted(p for p in OUTPUTS.rglob("*.txt"))


def _numbers_replaced(text: str, number: str) -> str:
    import re

    # the first 50 numbers: every parser's figures come early, and 50 of 5,000 digits
    # keep an output a quarter of a MiB at most
    return re.sub(r"\d+(\.\d+)?", number, text, count=50)


OUTPUT_CLASSES: dict[str, Callable[[str], str]] = {
    "huge digits": lambda t: _numbers_replaced(t, HUGE),
    "huge decimals": lambda t: _numbers_replaced(t, HUGE_DECIMAL),
    "1e999": lambda t: _numbers_replaced(t, "1e999"),
    "nan": lambda t: _numbers_replaced(t, "nan"),
    "dotted": lambda t: _numbers_replaced(t, "1.2.3"),
    "escapes": lambda t: "".join(ESCAPES) + t.replace("\n", "\x1b[2K\n"),
    "markup": lambda t: t.replace(" ", " [/] "),
}


def test_the_corpus_finds_every_parser() -> None:
    """The parsers the examples use are among those found (a new one is found the same
    way)."""
    used = {spec.parse for spec in EXAMPLES.values()} | {
        spec.parse_server for spec in EXAMPLES.values() if spec.parse_server}
    assert used <= set(PARSERS.values())
    assert len(PARSERS) >= 15 and len(CAPTURED) >= 80


@pytest.mark.parametrize("kind", OUTPUT_CLASSES)
@pytest.mark.parametrize("parser", sorted(PARSERS))
def test_every_parser_gives_figures_or_a_reason_on_hostile_output(parser: str,
                                                                  kind: str) -> None:
    parse, change = PARSERS[parser], OUTPUT_CLASSES[kind]
    started = time.monotonic()
    for path in CAPTURED:
        figures, reason = parse_output(parse, change(path.read_text()), "the client")
        if reason:
            assert figures is None and reason.startswith("cannot read the client's output: ")
            assert len(reason) < 400
            continue
        if figures is None:  # parse_counters' "nothing to read"
            continue
        if dataclasses.is_dataclass(figures) and not isinstance(figures, type):
            figures = dataclasses.asdict(figures)
        json_text(figures)  # raises on NaN or infinity
        assert not any(isinstance(v, int) and abs(v) >= 1 << 64 for v in _leaves(figures))
    assert time.monotonic() - started < 30, parser


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item)
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        yield from _leaves(vars(value))
    else:
        yield value


RUN_OUTPUTS: dict[str, Callable[[str], str]] = {
    "huge digits": OUTPUT_CLASSES["huge digits"],
    "huge seconds": lambda t: __import__("re").sub(r"in [\d.]+ seconds",
                                                   f"in {HUGE_DECIMAL} seconds", t),
}


@pytest.mark.parametrize("kind", RUN_OUTPUTS)
def test_a_run_whose_client_printed_unreadable_figures_fails_with_the_reason(
        lab_running: LabDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        kind: str) -> None:
    """Every node command answers the captured pingpong client output with its numbers
    made hostile: the run is a failed record saying why, not a traceback."""
    from labctl.runners import execute

    good = (OUTPUTS / "pingpong-rc-c.client.txt").read_text()
    _replies(monkeypatch, tmp_path, RUN_OUTPUTS[kind](good).encode())
    # the stand-in server answers and exits at once: it is taken as listening
    monkeypatch.setattr(execute, "_wait_listening", lambda *args: None)
    result = run_example(LabHandle(lab_running), EXAMPLES[("pingpong", "rc")], "node1",
                         "node2", {})
    assert result.status == "failed"
    assert "cannot read the client's output: " in result.reason
    assert result.figures == {}


# --- boundary 3: what a node replies -------------------------------------------------------
def _status_with(field: str, raw: str) -> bytes:
    """The captured status reply with one device field's JSON value replaced by `raw`."""
    report = json.loads(GOOD_STATUS)
    report["devices"][0][field] = "@@"
    return json.dumps(report).replace('"@@"', raw).encode()


# Numbers in two fields, text in two: every class, each value once (a case costs a
# process per node, about 3 s of CPU).
NODE_REPLIES: dict[str, bytes] = {
    **{f"gid_index {n[:10]}": _status_with("gid_index", n) for n in JSON_NUMBERS[::2]},
    **{f"active_mtu {n[:10]}": _status_with("active_mtu", n) for n in JSON_NUMBERS[1::2]},
    **{f"name {t!r}": _status_with("name", json.dumps(t)) for t in TERMINAL_TEXTS[::2]},
    **{f"port_state {t!r}": _status_with("port_state", json.dumps(t))
       for t in TERMINAL_TEXTS[1::2]},
}


# Each reply goes to the status table (what a terminal shows) and to one of the other
# commands that print a node's words, in turn.
REPLY_COMMANDS = [("status", "--json"), ("devinfo",), ("devinfo", "--json"),
                  ("devices", "--json")]
REPLY_CASES = [(reply, command) for i, reply in enumerate(NODE_REPLIES)
               for command in (("status",), REPLY_COMMANDS[i % len(REPLY_COMMANDS)])]


@pytest.mark.parametrize(("reply", "command"), REPLY_CASES,
                         ids=[f"{' '.join(c)}-{r}" for r, c in REPLY_CASES])
def test_a_nodes_hostile_reply_is_a_reason_never_a_traceback_or_an_escape(
        lab_running: LabDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], reply: str, command: tuple[str, ...]) -> None:
    _replies(monkeypatch, tmp_path, NODE_REPLIES[reply], node="node1")
    started = time.monotonic()
    code, out, err = run_main(monkeypatch, capsys, *command, "--lab", LAB)
    assert time.monotonic() - started < 60
    assert code in (0, 1), err
    assert "Traceback" not in out + err
    _no_escape(out, err)
    if "--json" in command:
        _strict_json(out)


# --- boundary 4: the files of a lab directory ----------------------------------------------
def _socket_at(path: Path) -> None:
    """A Unix socket at `path` (bound by its name from its directory: a socket's address
    holds at most 107 bytes)."""
    path.unlink(missing_ok=True)
    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(path.name)  # the socket file stays after close
    finally:
        os.chdir(cwd)


def _fifo_at(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _json_with_hostile_numbers(path: Path) -> None:
    import re

    text = path.read_text()
    path.unlink()
    path.write_text(re.sub(r"(?<=[:\[,] )-?\d+(\.\d+)?", HUGE, text, count=3))


def _json_with_nan(path: Path) -> None:
    import re

    text = path.read_text()
    path.unlink()
    path.write_text(re.sub(r"(?<=[:\[,] )-?\d+(\.\d+)?", "NaN", text, count=3))


def _escapes_in_strings(path: Path) -> None:
    text = path.read_text()
    path.unlink()
    path.write_text(text.replace('": "', '": "' + json.dumps("".join(TERMINAL_TEXTS))[1:-1]))


FILE_CLASSES: dict[str, Callable[[Path], None]] = {
    "socket": _socket_at, "fifo": _fifo_at,
    "huge digits": _json_with_hostile_numbers, "NaN": _json_with_nan,
    "escapes and markup": _escapes_in_strings,
}
TEXT_FILE_CLASSES = ("huge digits", "NaN", "escapes and markup")


def _lab_files(labdir: LabDir) -> list[str]:
    """The regular files of a lab directory as made (lab.json, state.json, the nodes'
    files): found by walking it, so a file a later labctl adds is tried too."""
    return sorted(str(p.relative_to(labdir.path)) for p in labdir.path.rglob("*")
                  if p.is_file() and not p.name.startswith("."))


@pytest.fixture
def stopped_lab(state_dir: Path) -> LabDir:
    """Lab ut-replies as `up` left it, its nodes stopped (no node is asked anything)."""
    labdir = make_lab(state_dir)
    (labdir.path / "faults.json").write_text(
        (OUTPUTS / "fault-list.json").read_text().replace('"lab": "demo",', ""))
    state = labdir.load_state()
    for node in state.nodes.values():
        node.pid = None
    labdir.save_state(state)
    return labdir


LAB_COMMANDS = [("status",), ("status", "--json"), ("fault", "list", "--json"),
                ("link", "show"), ("exec", "node1", "--", "true")]


@pytest.mark.parametrize("kind", FILE_CLASSES)
def test_every_lab_file_replaced_by_a_hostile_one(
        stopped_lab: LabDir, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], kind: str) -> None:
    files = _lab_files(stopped_lab)
    assert {"lab.json", "state.json", "faults.json"} <= set(files)
    pristine = {name: (stopped_lab.path / name).read_bytes() for name in files}
    for name in files:
        path = stopped_lab.path / name
        if kind in TEXT_FILE_CLASSES and not name.endswith(".json"):
            continue
        path.unlink()
        path.write_bytes(pristine[name])
        FILE_CLASSES[kind](path)
        for command in LAB_COMMANDS:
            started = time.monotonic()
            code, out, err = run_main(monkeypatch, capsys, command[0], "--lab", LAB,
                                      *command[1:])
            assert time.monotonic() - started < 30, (name, command)
            assert code in (0, 1, 2), (name, command, err)
            assert "Traceback" not in out + err
            if code:  # status reports a lab it cannot read in its own line
                flat = " ".join(err.split())  # rich wraps at the console's width
                assert "hint:" in flat or "labctl down" in flat, err
            _no_escape(out, err)
            if "--json" in command and out.strip():
                _strict_json(out)
        path.unlink()
        path.write_bytes(pristine[name])


# --- boundary 5: the image cache -----------------------------------------------------------
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    image = cache / "labctl" / "images" / "trixie-0123456789abcdef"
    image.mkdir(parents=True)
    (image / "manifest.json").write_text(json.dumps({
        "name": "trixie", "key": "trixie-0123456789abcdef", "kernel": "6.12.1",
        "rdma_core": "52.0", "rootfs_bytes": 1 << 30, "build_seconds": 100.5}))
    saved = cache / "labctl" / "saved" / "trixie-0123456789abcdef-fedcba9876543210"
    saved.mkdir(parents=True)
    (saved / "meta.json").write_text(json.dumps({
        "format": "2", "key": "fedcba9876543210", "state_bytes": 4096, "ram_bytes": 8192,
        "made": 1700000000.5, "shape": {"accel": "tcg", "memory_mib": 512, "cpus": 1,
                                        "nics": 1, "rdma": "rxe"}}))
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(cache / "labctl"))
    return cache / "labctl"


CACHE_CHANGES: dict[str, tuple[str, str, Any]] = {
    **{f"manifest {key} {t!r}": ("manifest", key, t) for i, t in enumerate(TERMINAL_TEXTS)
       for key in [("name", "kernel", "rdma_core", "key")[i % 4]]},
    **{f"manifest rootfs_bytes {n[:10]}": ("manifest", "rootfs_bytes", n) for n in JSON_NUMBERS},
    **{f"meta made {n[:10]}": ("meta", "made", n) for n in [*JSON_NUMBERS, "1e300", "-1e300"]},
    **{f"meta ram_bytes {n[:10]}": ("meta", "ram_bytes", n) for n in JSON_NUMBERS},
    "manifest a socket": ("manifest", "", "socket"),
    "meta a socket": ("meta", "", "socket"),
    "manifest a fifo": ("manifest", "", "fifo"),
}


@pytest.mark.parametrize("change", CACHE_CHANGES)
@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_image_list_of_a_hostile_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str], change: str,
                                       as_json: bool) -> None:
    from labctl.vm import saved as saved_module

    monkeypatch.setattr(saved_module, "qemu_version", lambda: "QEMU 9.2")  # not asked 142 times
    cache = _cache(tmp_path, monkeypatch)
    which, key, value = CACHE_CHANGES[change]
    path = next(cache.rglob("manifest.json" if which == "manifest" else "meta.json"))
    if key:
        record = json.loads(path.read_text())
        record[key] = "@@"
        raw = json.dumps(value) if isinstance(value, str) and not value[-1:].isdigit() \
            and value not in ("NaN", "Infinity", "-Infinity") else value
        path.write_text(json.dumps(record).replace('"@@"', raw))
    else:
        path.unlink()
        FILE_CLASSES[value](path)
    code, out, err = run_main(monkeypatch, capsys, "image", "list", *(["--json"] if as_json
                                                                       else []))
    assert code == 0, err
    assert "Traceback" not in out + err
    _no_escape(out, err)
    if as_json:
        _strict_json(out)


# --- boundary 6: files given on the command line -------------------------------------------
def _pcap(path: Path, records: int) -> Path:
    import struct

    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    path.write_bytes(header + struct.pack("<IIII", 1, 0, 0, 0) * records)
    return path


@pytest.mark.parametrize("records", [3, 200_000])
def test_a_pcap_of_empty_records_decodes_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], records: int) -> None:
    """200k empty records: once two minutes of dissecting nothing; now skipped, and the
    file read no further after 1,000 of them."""
    path = _pcap(tmp_path / "empty.pcap", records)
    started = time.monotonic()
    code, out, err = run_main(monkeypatch, capsys, "capture", "--decode", str(path))
    assert time.monotonic() - started < 10
    assert code == 0 and "records hold no bytes" in err
    assert out.strip() == "counts:"


NAME_MAX_PATHS = {"a name of 300 bytes": "n" * 300, "a path of 6,000": "d/" * 3000}


@pytest.mark.parametrize("which", NAME_MAX_PATHS)
@pytest.mark.parametrize("command", [("validate",), ("up",), ("down",), ("graph",),
                                     ("capture", "--decode")], ids=" ".join)
def test_paths_past_name_max_on_the_command_line(
        tmp_path: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], which: str, command: tuple[str, ...]) -> None:
    code, _, err = run_main(monkeypatch, capsys, *command,
                            str(tmp_path / NAME_MAX_PATHS[which]))
    assert code == 2, err
    assert "error:" in err and "hint:" in err and "Traceback" not in err


@pytest.mark.parametrize("variable", ["LABCTL_STATE_DIR", "LABCTL_CACHE_DIR",
                                      "XDG_CACHE_HOME"])
@pytest.mark.parametrize("which", NAME_MAX_PATHS)
def test_roots_past_name_max_in_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], variable: str, which: str) -> None:
    monkeypatch.delenv("LABCTL_CACHE_DIR", raising=False)
    monkeypatch.setenv(variable, str(tmp_path / NAME_MAX_PATHS[which]))
    command = ("status",) if variable == "LABCTL_STATE_DIR" else ("image", "list")
    code, _, err = run_main(monkeypatch, capsys, *command)
    assert code == 2, err
    assert f"{variable}=" in err and "hint:" in err


@pytest.mark.parametrize("source", ["/proc/1/root/etc", "/proc/1/root",
                                    "/tmp/" + "n" * 300, "/tmp/" + "d/" * 3000])
def test_mount_sources_labctl_cannot_look_at(tmp_path: Path, state_dir: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str],
                                             source: str) -> None:
    topology = tmp_path / "t.yaml"
    topology.write_text(f'name: t\nnodes:\n  a: {{mounts: ["{source}:/mnt/x"]}}\n  b: {{}}\n'
                        "links:\n  - endpoints: [a:eth1, b:eth1]\n")
    code, _, err = run_main(monkeypatch, capsys, "validate", str(topology))
    assert code == 2, err
    assert "nodes.a.mounts[0]" in err and "hint:" in err


@pytest.mark.parametrize("number", [HUGE, HUGE_DECIMAL, "1e999", ".nan", ".inf"])
@pytest.mark.parametrize("field", ["memory", "cpus", "mtu"])
def test_topology_numbers_past_what_a_number_may_be(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        number: str, field: str) -> None:
    topology = tmp_path / "t.yaml"
    where = "links" if field == "mtu" else "nodes"
    node_extra = "" if where == "links" else f", {field}: {number}"
    link_extra = f", {field}: {number}" if where == "links" else ""
    topology.write_text(f"name: t\nnodes:\n  a: {{rdma: rxe{node_extra}}}\n  b: {{}}\n"
                        f"links:\n  - {{endpoints: [a:eth1, b:eth1]{link_extra}}}\n")
    code, _, err = run_main(monkeypatch, capsys, "validate", str(topology))
    assert code == 2, err
    assert "error:" in err and "hint:" in err
