"""Bad input at the command line: exit 2, one message that says where, nothing created.

Every bad topology of the corpus (tests/unit/topology/bad, the exact messages in its
*.expected files) goes through `labctl up` and `labctl validate` as a user would type them
(in-process through labctl's own entry point, a sample also as a real process), plus
hypothesis-made broken topologies and bad arguments to up, link set, run, exec, status and
down. The state directory is a temporary one and the provider is replaced by a tripwire: a
file that wrongly passed could never boot anything, it fails the test instead.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import labctl.lab.lifecycle as up_module
from labctl.net import labnet
from labctl.store.labdir import LabDir
from labctl.store.state import LabState, Phase
from labctl.topology.load import load_lab
from labctl.topology.model import LAB_NAME_RE, NODE_NAME_RE
from tests.unit.clirun import run_main

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "topology"
BAD = sorted((DATA / "bad").glob("*.yaml"))
SAMPLE = BAD[:: max(1, len(BAD) // 5)][:5]  # also run as real processes
TWO_NODE = yaml.safe_load((REPO / "topologies/two-node.yaml").read_text())
_BOX = re.compile(r"[│╭╮╰╯─]+")


def _flat(text: str) -> str:
    """Rich wraps long lines and boxes click's errors: one line of words, to compare."""
    return " ".join(_BOX.sub(" ", text).split())


class Cli:
    def __init__(self, state: Path, capsys: pytest.CaptureFixture[str],
                 monkeypatch: pytest.MonkeyPatch) -> None:
        self.state = state
        self.capsys = capsys
        self.monkeypatch = monkeypatch

    def __call__(self, *args: str) -> tuple[int, str, str]:
        return run_main(self.monkeypatch, self.capsys, *args)

    def made_nothing(self, lab_names: set[str]) -> None:
        assert sorted(p.name for p in self.state.iterdir()) == []
        left = {f"labctl-{n}" for n in lab_names} & set(labnet.lab_namespaces())
        assert not left


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> Cli:
    state = tmp_path / "labs"
    state.mkdir()
    monkeypatch.setenv("LABCTL_STATE_DIR", str(state))
    # Wide enough for any tmp_path (a pytest-xdist worker's is longer): rich folds a path
    # longer than the line inside the path, which _flat cannot join again.
    monkeypatch.setenv("COLUMNS", "200")

    def tripwire(*args: object, **kwargs: object) -> None:
        raise AssertionError("bad input reached the provider")

    monkeypatch.setattr(up_module, "provider_for", tripwire)
    return Cli(state, capsys, monkeypatch)


def _name_in(path: Path) -> set[str]:
    try:
        data = yaml.safe_load(path.read_text())
        name = data.get("name") if isinstance(data, dict) else None
    except (yaml.YAMLError, RecursionError):  # the corpus has a 500-deep document
        return set()
    return {name} if isinstance(name, str) and name else set()


def _one_error(err: str) -> str:
    assert "Traceback" not in err
    assert err.count("error:") == 1, err
    return _flat(err)


# --- the corpus through the CLI ---------------------------------------------------------


def test_corpus_is_all_there() -> None:
    assert len(BAD) >= 50
    assert all(p.with_suffix(".expected").is_file() for p in BAD)


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_up_of_a_bad_topology(path: Path, cli: Cli) -> None:
    cli.monkeypatch.chdir(DATA)
    lines = path.with_suffix(".expected").read_text().splitlines()
    message = "\n".join(line for line in lines if not line.startswith("hint: "))
    hints = [line for line in lines if line.startswith("hint: ")]
    # file:line first, or the count of problems then each problem's file:line
    assert re.match(rf"bad/{re.escape(path.name)}(:\d+|: \d+ problems\n  bad/.*:\d+): ",
                    message)
    for command in ("up", "validate"):
        code, out, err = cli(command, f"bad/{path.name}")
        assert code == 2, (command, out, err)
        flat = _one_error(err)
        assert f"error: {_flat(message)}" in flat
        assert all(_flat(hint) in flat for hint in hints)
    cli.made_nothing(_name_in(path))


@pytest.mark.parametrize("path", SAMPLE, ids=[p.stem for p in SAMPLE])
def test_up_of_a_bad_topology_as_a_process(path: Path, tmp_path: Path) -> None:
    env = {**os.environ, "LABCTL_STATE_DIR": str(tmp_path), "PYTHONPATH": str(REPO),
           "COLUMNS": "400"}
    result = subprocess.run([sys.executable, "-m", "labctl", "up", f"bad/{path.name}"],
                            capture_output=True, text=True, cwd=DATA, env=env, timeout=60,
                            check=False)
    message = path.with_suffix(".expected").read_text().splitlines()[0]
    assert result.returncode == 2
    assert f"error: {_flat(message)}" in _one_error(result.stderr)
    assert list(tmp_path.iterdir()) == []


# --- generated broken topologies ---------------------------------------------------------

_not_node_name = st.text(min_size=0, max_size=20).filter(
    lambda s: re.match(NODE_NAME_RE, s) is None)
_not_lab_name = st.text(min_size=0, max_size=25).filter(
    lambda s: re.match(LAB_NAME_RE, s) is None)
_word = st.from_regex(r"\A[a-z]{3,12}\Z")


def _breakages() -> st.SearchStrategy[tuple[str, Any]]:
    return st.one_of(
        st.tuples(st.just("node name"), _not_node_name),
        st.tuples(st.just("lab name"), _not_lab_name),
        st.tuples(st.just("memory"), st.one_of(st.integers(max_value=127),
                                                st.integers(min_value=65537),
                                                st.text(alphabet="abcxyz", min_size=1))),
        st.tuples(st.just("rdma"), _word.filter(lambda s: s not in ("rxe", "siw", "none"))),
        st.tuples(st.just("endpoint"), st.sampled_from(
            ["ghost:eth1", "node1", "node1:", ":eth1", "node1:eth1:x", "node1:eth1"])),
        st.tuples(st.just("top key"), _word.filter(
            lambda s: s not in ("name", "nodes", "links", "defaults", "addressing", "provider",
                                "kinds", "groups", "mtu"))),
        st.tuples(st.just("links type"), st.sampled_from([{}, "node1:eth1", 7, [[1, 2]]])),
    )


def _break(kind: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(TWO_NODE)
    doc["name"] = "gen-lab"
    if kind == "node name":
        doc["nodes"][value] = doc["nodes"].pop("node2")
        doc["links"][0]["endpoints"][1] = f"{value}:eth1"
    elif kind == "lab name":
        doc["name"] = value
    elif kind == "memory":
        doc["defaults"] = {"memory": value}
    elif kind == "rdma":
        doc["nodes"]["node1"] = {"rdma": value}
    elif kind == "endpoint":
        doc["links"][0]["endpoints"][1] = value  # "node1:eth1" twice is a loop
    elif kind == "top key":
        doc[value] = 1
    else:
        doc["links"] = value
    return doc


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
@given(breakage=_breakages())
def test_up_of_generated_broken_topologies(breakage: tuple[str, Any], cli: Cli) -> None:
    path = cli.state.parent / "gen.yaml"
    path.write_text(yaml.safe_dump(_break(*breakage), sort_keys=False))
    code, out, err = cli("up", str(path))
    assert code == 2, (breakage, out, err)
    flat = _one_error(err)
    assert re.search(rf"{re.escape(str(path))}:\d+: ", flat), flat  # file:line
    cli.made_nothing({"gen-lab", str(breakage[1])} if breakage[0] == "lab name" else {"gen-lab"})


# --- bad arguments -----------------------------------------------------------------------


@pytest.fixture
def fake_lab(cli: Cli) -> str:
    """A lab directory without VMs: enough for commands that refuse before any node."""
    lab = load_lab(REPO / "topologies/two-node.yaml")
    labdir = LabDir("ut-cli", root=cli.state)
    labdir.create(dataclasses.replace(lab, name="ut-cli"))
    labdir.save_state(LabState(provider="qemu", phase=Phase.UP))
    return "ut-cli"


TOPOLOGY = str(REPO / "topologies/two-node.yaml")
BAD_ARGS: list[tuple[list[str], str]] = [
    (["frobnicate"], "no such command"),
    (["up", "--bogus", TOPOLOGY], "no such option: --bogus"),
    (["up", TOPOLOGY, "--accel", "fast"], "--accel must be auto, kvm or tcg"),
    (["up", TOPOLOGY, "--timeout", "soon"], "invalid value"),
    (["up", "/nonexistent/lab.yaml"], "/nonexistent/lab.yaml: cannot read the topology file"),
    (["up"], "missing argument"),
    (["exec"], "missing argument"),
    (["link", "set", "node1:eth1", "sideways"], "link state must be up or down"),
    (["link", "set", "node1:eth1"], "nothing to do"),
    (["link", "set", "--lab", "ut-cli", "node1", "down"], "bad endpoint 'node1'"),
    (["link", "set", "--lab", "ut-cli", "node9:eth1", "down"], "has no node 'node9'"),
    (["link", "set", "--lab", "ut-cli", "node1:eth7", "down"], "no data interface 'eth7'"),
    (["link", "set", "--lab", "ut-cli", "node1:eth1", "--loss", "500%"], "bad --loss '500%'"),
    (["link", "set", "--lab", "ut-cli", "node1:eth1", "--delay", "soon"], "bad --delay 'soon'"),
    (["run", "pingpong", "--transport", "xyz"], "unknown transport 'xyz'"),
    (["run", "pingpong", "--impl", "rust"], "unknown implementation 'rust'"),
    (["run", "pingpong", "--transport", "ud", "--impl", "python"], "speaks RC only"),
    (["run", "pingpong", "--iters", "many"], "invalid value"),
    (["run", "perftest", "ib_nope"], "unknown perftest 'ib_nope'"),
    (["run", "nope"], "no such command"),
    (["exec", "--lab", "ut-cli", "node9", "--", "true"], "has no node 'node9'"),
    (["status", "--lab", "Bad_Name"], "bad lab name 'Bad_Name'"),
    (["down", "--lab", "a/b"], "bad lab name 'a/b'"),
]


@pytest.mark.parametrize(("args", "says"), BAD_ARGS, ids=[" ".join(a) for a, _ in BAD_ARGS])
def test_bad_arguments(args: list[str], says: str, cli: Cli, fake_lab: str) -> None:
    before = sorted(p.name for p in cli.state.iterdir())
    code, out, err = cli(*args)
    assert code == 2, (out, err)
    assert "Traceback" not in err
    assert says in _flat(err)
    assert sorted(p.name for p in cli.state.iterdir()) == before  # nothing made or removed
    assert sorted(p.name for p in (cli.state / fake_lab).iterdir()) == ["lab.json", "state.json"]


# Every command that takes a node name says the same of one the lab lacks (lookup.py):
# (arguments, the option the name came in, if any)
UNKNOWN_NODE: list[tuple[list[str], str]] = [
    (["exec", "--lab", "ut-cli", "node9", "--", "true"], ""),
    (["cp", "node9:/etc/hostname", "-"], ""),
    (["logs", "node9"], ""),
    (["counters", "node9"], ""),
    (["devinfo", "node1", "node9"], ""),
    (["stop", "node9"], ""),
    (["link", "set", "node9:eth1", "down"], ""),
    (["fault", "add", "node9:eth1", "drop"], ""),
    (["capture", "node9:eth1", "-c", "1"], ""),
    (["run", "pingpong", "--server", "node9"], "--server: "),
    (["run", "nfs", "--client", "node9"], "--client: "),
    (["run", "pingpong", "--pairs", "node1:node9"], "--pairs: "),
    (["run", "mpi", "--nodes", "node1,node9"], "--nodes: "),
    (["run", "rdma-core-tests", "--node", "node9"], "--node: "),
]


@pytest.mark.parametrize(("args", "flag"), UNKNOWN_NODE,
                         ids=[" ".join(a) for a, _ in UNKNOWN_NODE])
def test_an_unknown_node_is_one_message_everywhere(args: list[str], flag: str, cli: Cli,
                                                   fake_lab: str) -> None:
    code, out, err = cli(*args, *([] if "--" in args else ["--lab", fake_lab]))
    assert code == 2, (out, err)
    assert _flat(err) == (f"error: {flag}lab ut-cli has no node 'node9' "
                          "hint: nodes: node1, node2")


def test_the_unknown_node_message_is_written_once() -> None:
    writers = sorted(str(path.relative_to(REPO)) for path in (REPO / "labctl").rglob("*.py")
                     if re.search(r"has no node(?! with)", path.read_text()))
    assert writers == ["labctl/topology/lookup.py"]


def test_down_of_a_path_is_refused_and_removes_nothing(cli: Cli) -> None:
    """`labctl down --lab ..` once removed the state directory's parent (rmtree)."""
    sentinel = cli.state.parent / "someone-elses-file"
    sentinel.write_text("keep me\n")
    for name in ("..", "../..", ".", "labs/.."):
        for command in (["down", "--lab", name], ["status", "--lab", name]):
            code, _, err = cli(*command)
            assert code == 2, err
            assert "bad lab name" in _flat(err)
    assert sentinel.read_text() == "keep me\n"
    assert cli.state.is_dir()
