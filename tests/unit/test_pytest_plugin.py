"""labctl's pytest plugin without VMs: registration, options, topology choice, clean errors
when no lab can come up, placeholders, testinfra hosts. Its live use is the integration
suite itself (tests/integration/conftest.py) and tests/integration/test_workbench.py.

The plugin runs in real pytest subprocesses (as a user's session would load it: through
its entry point), with a lab state directory of their own.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from labctl.errors import UsageError
from labctl.lab import lifecycle
from labctl.lab.handle import LabHandle
from labctl.pytest_plugin import LabSpec, RdmaLab, RdmaLabError
from labctl.pytest_plugin.session import locate_topology
from labctl.store.labdir import LabDir
from labctl.topology.load import load_lab

REPO = Path(__file__).resolve().parents[2]
TWO_NODE = REPO / "topologies" / "two-node.yaml"
USES_THE_LAB = "def test_it(rdma_lab):\n    assert rdma_lab.nodes\n"


def pytest_in(directory: Path, *args: str) -> tuple[int, str]:
    """A pytest session in `directory` (its own rootdir), its exit code and output."""
    (directory / "pytest.ini").write_text("[pytest]\n")
    env = {**os.environ, "LABCTL_STATE_DIR": str(directory / "state")}
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                            cwd=directory, env=env, capture_output=True, text=True,
                            timeout=300, stdin=subprocess.DEVNULL)
    return result.returncode, result.stdout + result.stderr


def test_the_entry_point_registers_the_plugin() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"]["pytest11"] == {"rdma_lab": "labctl.pytest_plugin"}
    (point,) = [p for p in importlib.metadata.entry_points(group="pytest11")
                if p.name == "rdma_lab"]
    assert point.value == "labctl.pytest_plugin"
    # testinfra comes with the plugin's extra, which the test extra includes
    extras = pyproject["project"]["optional-dependencies"]
    assert any(d.startswith("pytest-testinfra") for d in extras["pytest"])
    assert "labctl[pytest]" in extras["test"]


def test_options_and_marker_are_there(tmp_path: Path) -> None:
    code, out = pytest_in(tmp_path, "--help")
    assert code == 0
    for option in ("--rdma-lab-topology=PATH_OR_NAME", "--rdma-lab-keep", "--rdma-lab-name"):
        assert option in out
    code, out = pytest_in(tmp_path, "--markers")
    assert "@pytest.mark.rdma_lab(topology, name=None)" in out


def _clean_error(out: str, *expected: str) -> None:
    assert "Traceback" not in out and "labctl/pytest_plugin" not in out, out
    for text in expected:
        assert text in out, out


def test_no_topology_is_an_error_that_says_what_to_give(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text(USES_THE_LAB)
    code, out = pytest_in(tmp_path)
    assert code == 1
    _clean_error(out, "1 error", "rdma_lab: no topology for the rdma_lab fixture",
                 "hint: give --rdma-lab-topology PATH_OR_NAME, or mark the tests with")
    assert not (tmp_path / "state").exists()


def test_a_bad_marked_topology_gives_labctls_message_and_hint(tmp_path: Path) -> None:
    """The marker's path is relative to the test file; the topology's error is labctl's
    (file, line, field, hint); nothing is made."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "lab.yaml").write_text("name: plug-u\nnodes:\n  node1: {colour: red}\n")
    (sub / "test_a.py").write_text(
        'import pytest\n\n@pytest.mark.rdma_lab(topology="lab.yaml")\n' + USES_THE_LAB)
    code, out = pytest_in(tmp_path)
    assert code == 1
    _clean_error(out, "rdma_lab: ", "lab.yaml:3: nodes.node1.colour: unknown key 'colour'",
                 "hint: keys allowed here")
    assert not (tmp_path / "state").exists()


def test_a_topology_is_a_file_near_the_asker_or_a_shipped_name(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text("name: mine\n")
    assert locate_topology("mine.yaml", tmp_path) == tmp_path / "mine.yaml"
    assert locate_topology("two-node", tmp_path).name == "two-node.yaml"
    with pytest.raises(UsageError) as caught:
        locate_topology("no-such-lab", tmp_path)
    assert caught.value.message == ("'no-such-lab' is neither a topology file nor a shipped "
                                    "topology")
    assert "two-node" in (caught.value.hint or "")


def test_two_labs_in_one_session_are_refused(tmp_path: Path) -> None:
    for name in ("one", "two"):
        (tmp_path / f"{name}.yaml").write_text(TWO_NODE.read_text())
        (tmp_path / f"test_{name}.py").write_text(
            f'import pytest\n\n@pytest.mark.rdma_lab(topology="{name}.yaml")\n' + USES_THE_LAB)
    code, out = pytest_in(tmp_path)
    assert code == 1
    _clean_error(out, "2 errors", "rdma_lab: the tests ask for several labs: ", "one.yaml (by "
                 "test_one.py::test_it)", "hint: one session has one lab")


def test_a_lab_that_cannot_come_up_fails_cleanly_and_leaves_nothing(tmp_path: Path) -> None:
    """The provider's refusal (here: no Docker engine at an address that has none) is the
    error of each test that needs the lab, with labctl's hint; what `up` made is removed."""
    topology = tmp_path / "lab.yaml"
    topology.write_text(TWO_NODE.read_text().replace("name: two-node", "name: plug-u\n"
                                                     "provider: docker"))
    (tmp_path / "test_a.py").write_text(USES_THE_LAB + "\n\ndef test_b(rdma_lab):\n    pass\n")
    env_engine = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = f"unix://{tmp_path}/no-engine.sock"
    os.environ["LABCTL_DOCKER_ENGINE"] = "local"
    try:
        code, out = pytest_in(tmp_path, "--rdma-lab-topology", "lab.yaml")
    finally:
        del os.environ["LABCTL_DOCKER_ENGINE"]
        if env_engine is None:
            del os.environ["DOCKER_HOST"]
        else:
            os.environ["DOCKER_HOST"] = env_engine
    assert code == 1
    _clean_error(out, "2 errors", "rdma_lab: the Docker engine of this host",
                 "hint: start the Docker engine")
    assert not (tmp_path / "state" / "plug-u").exists()


def test_a_session_uses_the_lab_labctl_lab_names_as_it_is_and_leaves_it_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As `labctl matrix` runs `pytest FILE` in the lab it brought up on a kernel: the
    session's lab is that one (not the marker's topology), and the session removes nothing."""
    LabDir("two-node", root=tmp_path / "state").create(load_lab(TWO_NODE))
    (tmp_path / "test_a.py").write_text(
        'import pytest\n\n@pytest.mark.rdma_lab(topology="no-such-file.yaml")\n'
        "def test_it(rdma_lab):\n"
        '    assert rdma_lab.name == "two-node"\n'
        '    assert rdma_lab.nodes == ["node1", "node2"]\n'
        "    assert rdma_lab.up_result is None\n")
    monkeypatch.setenv("LABCTL_LAB", "two-node")
    code, out = pytest_in(tmp_path)
    assert code == 0, out
    assert "1 passed" in out and "was kept up" not in out
    assert LabDir("two-node", root=tmp_path / "state").exists()


@pytest.mark.parametrize(("name", "expected"), [
    ("gone", ("rdma_lab: lab gone (LABCTL_LAB) is not up",
              "hint: bring it up with `labctl up`, or unset LABCTL_LAB")),
    ("../x", ("rdma_lab: LABCTL_LAB: bad lab name", "hint: set LABCTL_LAB to a lab's name")),
])
def test_labctl_lab_naming_no_lab_that_is_up_is_a_clean_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
        expected: tuple[str, str]) -> None:
    (tmp_path / "test_a.py").write_text(USES_THE_LAB)
    monkeypatch.setenv("LABCTL_LAB", name)
    code, out = pytest_in(tmp_path)
    assert code == 1
    _clean_error(out, "1 error", *expected)
    assert not (tmp_path / "state" / "gone").exists()  # nothing made


# --- the pieces, in process --------------------------------------------------------------


def test_the_name_option_renames_the_resolved_lab() -> None:
    spec = LabSpec(TWO_NODE, "plug-x")
    assert lifecycle.resolve(TWO_NODE, spec.up_options()).name == "plug-x"
    assert lifecycle.resolve(TWO_NODE, LabSpec(TWO_NODE).up_options()).name == "two-node"
    with pytest.raises(UsageError, match="bad lab name"):
        lifecycle.resolve(TWO_NODE, LabSpec(TWO_NODE, "../x").up_options())


@pytest.fixture
def recorded_lab(tmp_path: Path) -> RdmaLab:
    """A lab directory as `up` leaves it (lab.json, ssh_config), no VM behind it."""
    labdir = LabDir("two-node", root=tmp_path)  # lab.json names its directory's lab
    labdir.create(load_lab(TWO_NODE))
    labdir.ssh_config.write_text("Host node1\n  HostName 127.0.0.1\n")
    return RdmaLab(LabHandle(labdir), None)


def test_host_is_testinfra_over_the_labs_ssh_config(recorded_lab: RdmaLab) -> None:
    host = recorded_lab.host("node1")
    assert host.backend.NAME == "ssh"
    assert host.backend.host.name == "node1"
    assert host.backend.ssh_config == str(recorded_lab.handle.labdir.ssh_config)
    assert recorded_lab.host("node1") is host
    assert recorded_lab.nodes == ["node1", "node2"]
    assert recorded_lab.address("node2") == "10.77.1.2"
    with pytest.raises(RdmaLabError, match="has no node 'node9'"):
        recorded_lab.host("node9")
    with pytest.raises(RdmaLabError, match="no data interface 'eth7'"):
        recorded_lab.address("node1", "eth7")


def test_host_without_testinfra_says_what_to_install(recorded_lab: RdmaLab,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "testinfra", None)  # import fails
    with pytest.raises(RdmaLabError) as caught:
        recorded_lab.host("node2")
    assert str(caught.value) == ("rdma_lab.host() needs pytest-testinfra, which is not "
                                 "installed\nhint: pip install 'labctl[pytest]' (or pip "
                                 "install pytest-testinfra)")


def test_host_of_a_lab_without_ssh_says_what_to_use(recorded_lab: RdmaLab) -> None:
    recorded_lab.handle.labdir.ssh_config.unlink()
    with pytest.raises(RdmaLabError, match=r"host\(\) reaches nodes over the lab's ssh"):
        recorded_lab.host("node1")


def test_run_pair_refuses_a_bad_ready_port_before_anything_runs(
        recorded_lab: RdmaLab) -> None:
    for port in (0, 70000, "80", True):
        with pytest.raises(RdmaLabError, match="ready_port must be a TCP port"):
            recorded_lab.run_pair("a", "b", ready_port=port)  # type: ignore[arg-type]
    with pytest.raises(RdmaLabError, match="has no node 'node9'"):
        recorded_lab.run_pair("a", "b", server="node9")
    with pytest.raises(RdmaLabError, match="server and client must be different nodes"):
        recorded_lab.run_pair("a", "b", server="node2", client="node2")


def test_address_is_the_rdma_interfaces_when_that_is_not_the_first(tmp_path: Path) -> None:
    """A node whose device sits on eth2 (rdma_interfaces): address() without an interface
    is eth2's, the one a run between nodes uses; eth1's is still there by name."""
    topology = tmp_path / "second.yaml"
    topology.write_text("""
name: plug-s
nodes:
  a: {rdma_interfaces: [eth2]}
  b: {}
links:
  - endpoints: [a:eth1, b:eth1]
  - endpoints: [a:eth2, b:eth2]
""")
    labdir = LabDir("plug-s", root=tmp_path)
    labdir.create(load_lab(topology))
    lab = RdmaLab(LabHandle(labdir), None)
    eth1, eth2 = (i.address for i in lab.lab.node("a").interfaces)
    assert lab.address("a") == eth2 != eth1
    assert lab.address("a", "eth1") == eth1
