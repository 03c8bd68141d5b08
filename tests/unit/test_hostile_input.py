"""Hostile input: values that reach a shell, files that are not topologies, bad options.

The shell snippets labctl runs in nodes (ready probes, mckey's receiver script) are run
here for real with `sh`, with stub `ip`/`ss`/`rdma` programs, and hostile values: nothing
but the stubs may run. Files a user could pass as a topology (FIFO, /dev/zero, a huge or
binary file) and bad option values go through the CLI: exit 2, one message with a hint,
no traceback, nothing made.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import labctl.lab.lifecycle as up_module  # where `up` reaches the providers
from labctl.errors import UsageError
from labctl.runners.example_spec import Endpoint, RunContext, check_options
from labctl.runners.examples import (
    EXAMPLES,
    group_joined_probe,
    listening_probe,
    recvs_counter,
)
from labctl.store.labdir import LabDir, check_lab_name, find_labdir
from labctl.store.state import LabState, Phase
from labctl.topology.checks import Subnets, free_subnets
from labctl.topology.errors import TopologyError
from labctl.topology.load import load_lab, parse_topology, resolve
from labctl.topology.reading import MAX_FILE_BYTES
from tests.unit.clirun import run_main

REPO = Path(__file__).resolve().parents[2]
TWO_NODE = REPO / "topologies/two-node.yaml"
HOSTILE = [
    "239.1.1.1; touch pwned #",
    "$(touch pwned)",
    "`touch pwned`",
    "x' ; touch pwned ; '",
    'x" ; touch pwned ; "',
    "a\ntouch pwned",
    "-e touch pwned",
    "|| touch pwned",
]


# --- values that reach a shell ----------------------------------------------------------


@pytest.fixture
def stub_node(tmp_path: Path) -> Path:
    """A directory whose bin/ has stubs of the node programs the snippets call."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("ip", "ss", "rdma"):
        stub = bin_dir / name
        stub.write_text("#!/bin/sh\necho \"inet 239.1.1.1\"\n")
        stub.chmod(0o755)
    return tmp_path


def _run_snippet(script: str, where: Path) -> None:
    env = {"PATH": f"{where / 'bin'}:/usr/bin:/bin"}
    subprocess.run(["sh", "-c", script], cwd=where, env=env, capture_output=True,
                   timeout=10, check=False)


@pytest.mark.parametrize("value", HOSTILE)
def test_probes_quote_hostile_values(value: str, stub_node: Path) -> None:
    for script, word in ((group_joined_probe(value), value),
                         (recvs_counter(value), f"{value}/1")):
        assert word in shlex.split(script)  # one word, as written
        _run_snippet(script, stub_node)
        assert not (stub_node / "pwned").exists(), script


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=40).filter(lambda s: "\x00" not in s))
def test_any_text_is_one_word_of_the_probes(value: str) -> None:
    assert value in shlex.split(group_joined_probe(value))
    assert f"{value}/1" in shlex.split(recvs_counter(value))


def test_listening_probe_takes_only_a_port_number() -> None:
    assert shlex.split(listening_probe(18515))[:3] == ["ss", "-Hltn", "sport = :18515"]
    with pytest.raises(ValueError):
        listening_probe("1; touch pwned")  # type: ignore[arg-type]


def _ctx(options: dict[str, Any], device: str = "rxe0") -> RunContext:
    server = Endpoint("node1", device, "rxe", 1, "10.77.1.1")
    client = Endpoint("node2", device, "rxe", 1, "10.77.1.2")
    return RunContext(server, client, options)


@pytest.mark.parametrize("value", HOSTILE)
def test_mckey_receiver_script_quotes_the_group_and_device(value: str, stub_node: Path) -> None:
    """Even a value that got past the checks stays one word in the receiver's sh -c."""
    spec = EXAMPLES[("mckey", "ud")]
    argv = spec.server_argv(_ctx({"group": value}, device=value))
    assert argv[:2] == ["sh", "-c"]
    assert value in shlex.split(argv[2])
    bin_dir = stub_node / "bin"
    for name in ("stdbuf", "timeout"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / name).chmod(0o755)
    _run_snippet(argv[2], stub_node)
    assert not (stub_node / "pwned").exists()


def test_every_ready_probe_is_built_from_checked_values() -> None:
    ctx = _ctx(check_options({"port": 4000, "group": "239.2.2.2"}))
    probes = {name: spec.ready_probe(ctx) for name, spec in EXAMPLES.items()
              if spec.ready_probe is not None}
    assert probes
    assert {name: probe for name, probe in probes.items()
            if not ("4000" in probe or "239.2.2.2" in probe or "cm_id" in probe)} == {}


# --- option values ------------------------------------------------------------------------

BAD_OPTIONS: list[dict[str, Any]] = [
    {"timeout": -5}, {"timeout": 0}, {"timeout": math.nan}, {"timeout": math.inf},
    {"timeout": 1e9}, {"timeout": True}, {"port": 0}, {"port": 65536}, {"port": -1},
    {"size": 0}, {"size": -4096}, {"size": 1 << 40}, {"iters": 0}, {"iters": "100"},
    {"count": 0}, {"wait": 0}, {"wait": -1}, {"rx_depth": 0}, {"mtu": 70000}, {"mtu": 0},
    {"group": "239.1.1.1; touch pwned #"}, {"group": "10.0.0.1"}, {"group": "ff02::1"},
    {"group": "-x"}, {"group": "239.1.1.1\n"}, {"group": 239}, {"bogus": 1},
]


@pytest.mark.parametrize("options", BAD_OPTIONS, ids=[repr(o) for o in BAD_OPTIONS])
def test_bad_option_values_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(UsageError) as info:
        check_options(options)
    assert info.value.exit_code == 2
    assert info.value.hint


def test_good_option_values_pass() -> None:
    good = {"timeout": 0.5, "port": 65535, "size": 1, "iters": 10**9, "count": 1, "wait": 3600,
            "rx_depth": 1, "mtu": 4096, "group": "224.0.0.251", "verbose": True,
            "rdma_cm": False, "size2": None}
    good.pop("size2")
    assert check_options(good) == good


# --- the CLI ------------------------------------------------------------------------------


class Cli:
    def __init__(self, state: Path, capsys: pytest.CaptureFixture[str],
                 monkeypatch: pytest.MonkeyPatch) -> None:
        self.state, self.capsys, self.monkeypatch = state, capsys, monkeypatch

    def __call__(self, *args: str) -> tuple[int, str]:
        code, _, err = run_main(self.monkeypatch, self.capsys, *args)
        return code, " ".join(err.split())


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> Cli:
    state = tmp_path / "labs"
    state.mkdir()
    monkeypatch.setenv("LABCTL_STATE_DIR", str(state))
    monkeypatch.setenv("COLUMNS", "400")

    def tripwire(*args: object, **kwargs: object) -> None:
        raise AssertionError("bad input reached the provider")

    monkeypatch.setattr(up_module, "provider_for", tripwire)
    lab = load_lab(TWO_NODE)
    labdir = LabDir("ut-hostile", root=state)
    labdir.create(dataclasses.replace(lab, name="ut-hostile"))
    labdir.save_state(LabState(provider="qemu", phase=Phase.UP))
    return Cli(state, capsys, monkeypatch)


def _refused(cli: Cli, args: list[str], says: str) -> None:
    before = sorted(p.name for p in cli.state.rglob("*"))
    code, err = cli(*args)
    assert code == 2, (args, err)
    assert "Traceback" not in err and err.count("error:") == 1, err
    assert "hint:" in err, err
    assert says in err, (says, err)
    assert sorted(p.name for p in cli.state.rglob("*")) == before  # nothing made or removed


LAB = ["--lab", "ut-hostile"]
BAD_CLI: list[tuple[list[str], str]] = [
    (["run", "mckey", *LAB, "--group", "239.1.1.1; touch pwned #"], "--group must be an IPv4"),
    (["run", "mckey", *LAB, "--wait", "0"], "--wait must be"),
    (["run", "mckey", *LAB, "--count", "-3"], "--count must be"),
    (["run", "pingpong", *LAB, "--timeout", "-5"], "--timeout must be"),
    (["run", "pingpong", *LAB, "--timeout", "0"], "--timeout must be"),
    (["run", "pingpong", *LAB, "--timeout", "nan"], "--timeout must be"),
    (["run", "pingpong", *LAB, "--timeout", "inf"], "--timeout must be"),
    (["run", "pingpong", *LAB, "--port", "70000"], "--port must be"),
    (["run", "pingpong", *LAB, "--size", "0"], "--size must be"),
    (["run", "pingpong", *LAB, "--mtu", "0"], "--mtu must be"),
    (["run", "rping", *LAB, "--count", "0"], "--count must be"),
    (["run", "perftest", "ib_send_bw", *LAB, "--iters", "-1"], "--iters must be"),
    (["run", "all", *LAB, "--iters", "0"], "--iters must be"),
    (["bench", *LAB, "--rounds", "0"], "--rounds must be"),
    (["bench", *LAB, "--size", "-1"], "--sizes: '-1' is not a size"),
    (["bench", *LAB, "--sizes", "64,0"], "--sizes: 0 is out of range"),
    (["bench", *LAB, "--sizes", "64,;id"], "is not a size"),
    (["bench", *LAB, "--impls", "c,rdma"], "--impls: unknown implementation rdma"),
    (["up", str(TWO_NODE), "--timeout", "-5"], "--timeout must be"),
    (["docker-host", "up", "--memory", "1"], "--memory must be"),
    (["docker-host", "up", "--timeout", "nan"], "--timeout must be"),
    (["run", "pingpong", *LAB, "--server", "node9"], "has no node 'node9'"),
    (["run", "pingpong", *LAB, "--client", "ghost"], "nodes: node1, node2"),
    (["run", "mckey", *LAB, "--server", "x" * 5000], "…"),
    (["exec", *LAB, "x" * 5000, "--", "true"], "bad node name 'xxx"),
    (["exec", *LAB, "node1\n", "--", "true"], "bad node name 'node1\\n'"),
    (["link", "set", *LAB, "node1:eth1", "--delay", "10ms\n"], "bad --delay"),
    (["link", "set", *LAB, "node1:eth1", "--delay", "99999s"], "bad --delay"),
    (["link", "set", *LAB, "node1:eth1", "--loss", "5%\n"], "bad --loss"),
]


@pytest.mark.parametrize(("args", "says"), BAD_CLI, ids=[" ".join(a)[:60] for a, _ in BAD_CLI])
def test_bad_values_exit_2(args: list[str], says: str, cli: Cli) -> None:
    _refused(cli, args, says)


# "LAB" is replaced by --lab NAME, before any `--` (after it, `--lab` would be the command's)
LAB_COMMANDS = [["status", "LAB"], ["exec", "LAB", "node1", "--", "true"],
                ["run", "pingpong", "LAB"], ["link", "set", "LAB", "node1:eth1", "down"],
                ["devices", "LAB"], ["down", "LAB"]]


def _with_lab(command: list[str], name: str) -> list[str]:
    i = command.index("LAB")
    return [*command[:i], "--lab", name, *command[i + 1:]]


@pytest.mark.parametrize("name", ["x\n", "", "A", "../x", "ut-hostile\n", "a" * 21, "x" * 5000])
@pytest.mark.parametrize("command", LAB_COMMANDS, ids=[c[0] for c in LAB_COMMANDS])
def test_bad_lab_names_exit_2(name: str, command: list[str], cli: Cli) -> None:
    _refused(cli, _with_lab(command, name), "bad lab name")


@pytest.mark.parametrize("command", LAB_COMMANDS[:-1], ids=[c[0] for c in LAB_COMMANDS[:-1]])
def test_unknown_lab_exits_2(command: list[str], cli: Cli) -> None:
    _refused(cli, _with_lab(command, "nosuch"), "no lab named 'nosuch' is up")


def test_lab_name_checks_use_fullmatch(tmp_path: Path) -> None:
    for name in ("x\n", "", "a/b", "x\ny"):
        with pytest.raises(UsageError):
            check_lab_name(name)
        with pytest.raises(UsageError):
            LabDir(name, root=tmp_path)
    with pytest.raises(UsageError):
        find_labdir("")  # not "the only lab"


# --- files given as a topology ------------------------------------------------------------


def _hostile_files(tmp: Path) -> dict[str, Path]:
    fifo = tmp / "fifo.yaml"
    os.mkfifo(fifo)
    huge = tmp / "huge.yaml"
    with huge.open("wb") as f:  # sparse: 4 GiB on paper, nothing on disk
        f.truncate(4 << 30)
    just_over = tmp / "over.yaml"
    just_over.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    binary = tmp / "binary.yaml"
    binary.write_bytes(bytes(range(256)) * 4)
    return {"fifo": fifo, "zero": Path("/dev/zero"), "huge": huge, "over": just_over,
            "binary": binary, "dir": tmp, "missing": tmp / "missing.yaml"}


@pytest.mark.parametrize("command", [["validate"], ["up"], ["down"]], ids=lambda c: c[0])
def test_hostile_files_exit_2_fast(command: list[str], cli: Cli, tmp_path: Path) -> None:
    says = {"fifo": "named pipe (FIFO)", "zero": "character device", "huge": "4294967296 bytes",
            "over": f"{MAX_FILE_BYTES + 1} bytes", "binary": "not UTF-8",
            "dir": "is a directory", "missing": "cannot read the topology file"}
    files = tmp_path / "files"
    files.mkdir()
    hostile = _hostile_files(files)
    assert hostile.keys() == says.keys()
    for kind, path in hostile.items():
        started = time.monotonic()  # wall time: a FIFO or device read would block, not spin
        _refused(cli, [*command, str(path)], says[kind])
        assert time.monotonic() - started < 20, kind


def test_fifo_as_a_process_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "t.yaml"
    os.mkfifo(fifo)
    env = {**os.environ, "LABCTL_STATE_DIR": str(tmp_path / "labs"), "PYTHONPATH": str(REPO)}
    for command in ("validate", "down"):
        result = subprocess.run([sys.executable, "-m", "labctl", command, str(fifo)],
                                capture_output=True, text=True, env=env, timeout=60,
                                check=False)
        assert result.returncode == 2, result.stderr
        assert "named pipe" in result.stderr and "Traceback" not in result.stderr


# --- topology text: depth, size, time, echoed values --------------------------------------


@pytest.mark.parametrize("opener", ["[", "{a: ", "- "])
def test_deep_nesting_is_a_located_error(opener: str) -> None:
    if opener == "- ":
        text = "name: t\nnodes:\n" + "".join("  " * i + "- \n" for i in range(600))
    else:
        text = "name: t\nnodes: " + opener * 600 + "\n"
    with pytest.raises(TopologyError) as info:
        parse_topology(text, "t.yaml")
    assert "nested deeper than" in info.value.message
    assert info.value.line is not None


def test_many_problems_take_linear_time() -> None:
    """20k unknown keys once took 96 s (each problem scanned the whole mapping)."""
    def seconds(n: int) -> float:
        text = "name: t\nnodes: {a: {rdma: none}}\n" + "".join(f"k{i}: 1\n" for i in range(n))
        started = time.process_time()  # CPU time: the cost, whatever else runs on the host
        with pytest.raises(TopologyError) as info:
            parse_topology(text, "t.yaml")
        lines = info.value.message.splitlines()
        assert lines[:2] == [f"t.yaml: {n} problems", "  t.yaml:3: k0: unknown key 'k0'"]
        assert lines[-1] == f"  ... and {n - 20} more"  # the first 20 are listed
        return time.process_time() - started

    assert seconds(20_000) < 15


def test_many_links_resolve_in_linear_time() -> None:
    """12k links with explicit and pool subnets: no step compares every pair."""
    nodes = [f"n{i}" for i in range(250)]
    links = []
    for k in range(6000):
        a, b = nodes[k % 250], nodes[(k // 250 + k % 250 + 1) % 250]
        links.append((a, b))
    # docker: 48 links per node are more than a qemu node has PCI slots for
    lines = ["name: t", "provider: docker", "addressing: {pool: 10.0.0.0/8, prefix: 30}",
             "nodes:"]
    lines += [f"  {n}: {{rdma: none}}" for n in nodes]
    lines.append("links:")
    used: dict[str, int] = {}
    for k, (a, b) in enumerate(links):
        if a == b:
            continue
        ia, ib = used.get(a, 0) + 1, used.get(b, 0) + 1
        if ia > 99 or ib > 99:
            continue
        used[a], used[b] = ia, ib
        lines.append(f"  - endpoints: [{a}:eth{ia}, {b}:eth{ib}]")
        if k % 2:
            lines.append(f"    subnet: 172.16.{k // 64}.{(k % 64) * 4}/30")
    started = time.process_time()  # CPU time: the cost, whatever else runs on the host
    lab = resolve(parse_topology("\n".join(lines) + "\n", "t.yaml"), "t.yaml")
    assert time.process_time() - started < 30
    assert len({s.subnet for s in lab.segments}) == len(lab.segments)
    assert not any(ipaddress.IPv4Network(s.subnet).overlaps(ipaddress.IPv4Network("10.0.2.0/24"))
                   for s in lab.segments)


@pytest.mark.parametrize("text", [
    "name: {big}\nnodes: {{a: {{}}}}\n",
    "name: t\nnodes: {{a: {{rdma: {big}}}}}\n",
    "name: t\nnodes: {{a: {{image: {big}}}}}\n",
    "name: t\nnodes: {{a: {{}}, b: {{}}}}\nlinks: [{{endpoints: [a:eth1, {big}]}}]\n",
    "name: t\nnodes: {{a: {{}}}}\naddressing: {{pool: {big}}}\n",
    "name: t\nnodes: {{a: {{}}}}\n? {big}\n: 1\n",
])
def test_long_values_are_cut_in_messages(text: str) -> None:
    big = "Q" * 200_000
    with pytest.raises(TopologyError) as info:
        parse_topology(text.format(big=big), "t.yaml")
    assert len(info.value.message) < 400, info.value.message[:500]
    assert "…" in info.value.message


def test_management_network_is_skipped_by_the_pool() -> None:
    lab = resolve(parse_topology(
        "name: t\naddressing: {pool: 10.0.0.0/16, prefix: 24}\nnodes: {a: {}, b: {}}\n"
        "links:\n  - endpoints: [a:eth1, b:eth1]\n  - endpoints: [a:eth2, b:eth2]\n",
        "t.yaml"), "t.yaml")
    assert [s.subnet for s in lab.segments] == ["10.0.1.0/24", "10.0.3.0/24"]


# --- the faster subnet steps agree with the obvious ones ----------------------------------

_nets = st.builds(lambda a, p: ipaddress.IPv4Network((a >> (32 - p) << (32 - p), p)),
                  st.integers(0xAC100000, 0xAC10FFFF), st.integers(16, 30))


@settings(max_examples=300, deadline=None)
@given(st.lists(_nets, max_size=12), st.integers(17, 26))
def test_free_subnets_match_the_quadratic_version(taken: list[Any], prefix: int) -> None:
    pool = ipaddress.IPv4Network("172.16.0.0/16")
    fast = list(free_subnets(pool, prefix, taken))
    slow = [n for n in list(pool.subnets(new_prefix=prefix))[1:]
            if not any(t.overlaps(n) for t in taken)]
    assert fast == slow


@settings(max_examples=300, deadline=None)
@given(st.lists(_nets, min_size=1, max_size=15))
def test_first_overlap_matches_the_quadratic_version(nets: list[Any]) -> None:
    seen = Subnets()
    fast, slow = [], []
    for i, net in enumerate(nets):
        slow.append(next((k for k in range(i) if nets[k].overlaps(net)), None))
        fast.append(seen.first_overlap(net))
        seen.add(net, i)
    assert fast == slow


@pytest.mark.parametrize(("text", "says"), [
    ("`not yaml`\n", "invalid YAML"),
    ("- a list\n", "cannot tell the lab from this file (no name)"),
    ("name: Bad_Name\nnodes: {}\n", "cannot tell the lab from this file (name 'Bad_Name')"),
    ("name: x\nnodes: " + "[" * 100 + "]" * 100 + "\n", "nested deeper than"),
])
def test_down_of_a_file_without_a_usable_name(text: str, says: str, cli: Cli,
                                               tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    _refused(cli, ["down", str(path)], says)
