"""labctl as an installed package: its data files, shipped topologies by name, --version,
shell completion, help text, the `plot` extra, node-side commands, setup.sh's checks.

The wheel itself (built, installed in a fresh venv, run from elsewhere, one live lab) is
tests/integration/test_package.py.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

import labctl
from labctl.cli import complete
from labctl.cli.app import version
from labctl.data import DATA_DIR, copied_files, data_path, source_files
from labctl.errors import UsageError
from labctl.store.labdir import LabDir
from labctl.topology import catalog
from labctl.topology.load import load_lab
from tests.unit.clirun import run_main

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            *args: str) -> tuple[int, str, str]:
    return run_main(monkeypatch, capsys, *args)


def _flat(text: str) -> str:
    return " ".join(re.sub(r"[│╭╮╰╯─]+", " ", text).split())


# --- data files: one source of truth, all in the wheel ------------------------------------


def test_packaged_copies_equal_the_top_level_files() -> None:
    """labctl/data holds a copy of the checkout's docker/node-image.conf; after editing it,
    refresh the copy with `python -m labctl.data`. (The Vagrantfile lives in labctl/data
    only: tests/unit/test_vagrant.py checks the top-level one loads it.)"""
    sources = source_files(REPO)
    assert sources == ["docker/node-image.conf"]
    assert copied_files() == sources, "run `python -m labctl.data` (copies out of date)"
    stale = [rel for rel in sources
             if (REPO / rel).read_bytes() != (DATA_DIR / rel).read_bytes()]
    assert stale == [], f"run `python -m labctl.data` to refresh {stale}"


def test_the_top_level_topologies_are_the_packaged_ones() -> None:
    """One set of shipped topologies: `topologies` is a link into the package, so editing
    topologies/two-node.yaml changes what `labctl up two-node` reads (a copy did not)."""
    from labctl.topology.catalog import find_topology

    link = REPO / "topologies"
    assert link.is_symlink() and os.readlink(link) == "labctl/data/topologies"
    assert link.resolve() == DATA_DIR / "topologies"
    assert find_topology("two-node").resolve() == (link / "two-node.yaml").resolve()
    shipped = sorted(p.name for p in (DATA_DIR / "topologies").iterdir())
    assert {"two-node.yaml", "siw-pair.yaml", "schema.json"} <= set(shipped)
    assert all(not p.is_symlink() for p in (DATA_DIR / "topologies").iterdir())


def test_every_file_labctl_reads_matches_a_package_data_pattern() -> None:
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["*"]
    files = [p for p in (REPO / "labctl").rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".py", ".pyc")]
    assert len(files) > 15
    left_out = [str(p.relative_to(REPO)) for p in files
                if not any(fnmatch.fnmatch(p.name, pat) for pat in patterns)]
    assert left_out == [], "add a package-data pattern in pyproject.toml for these"


def test_providers_read_the_packaged_copies() -> None:
    from labctl.providers.docker import docker_dir, import_changes
    from labctl.providers.vagrant import vagrantfile_dir

    assert docker_dir() == DATA_DIR / "docker"
    assert any(c.startswith("CMD ") for c in import_changes())
    assert vagrantfile_dir() / "Vagrantfile" == DATA_DIR / "Vagrantfile"
    assert 'load File.expand_path("labctl/data/Vagrantfile", __dir__)' in (
        REPO / "Vagrantfile").read_text()  # the checkout's is a pointer to it
    assert "labctl.verbs" not in str(vagrantfile_dir())  # the data dir, not a code dir


@pytest.mark.skipif(shutil.which("ruby") is None, reason="ruby not installed")
def test_the_packaged_vagrantfile_finds_its_files_in_site_packages(tmp_path: Path) -> None:
    """Installed, the Vagrantfile sits in site-packages/labctl/data, the topologies beside
    it; the installed labctl names the node-side code and package list in its plan."""
    site = tmp_path / "site-packages"
    shutil.copytree(REPO / "labctl", site / "labctl",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    script = ('load ARGV[0]; l = LabctlVagrant; puts l.topology({}); '
              'a = l.load_lab({**ENV, "LABCTL_TOPOLOGY" => ""}); '
              'b = l.load_lab({**ENV, "LABCTL_TOPOLOGY" => "topologies/siw-pair.yaml"}); '
              'puts a["name"], b["name"], a["vagrant"]["packages"].size, '
              'a["vagrant"]["node_init"], a["vagrant"]["node_code"].map { |f| f["source"] }'
              '.include?(ARGV[1])')
    result = subprocess.run(
        ["ruby", "-e", script, str(site / "labctl/data/Vagrantfile"),
         str(site / "labctl/nodeside/node-commands.sh")],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(site),
             "LABCTL_COMMAND": f"{sys.executable} -m labctl",
             "LABCTL_VAGRANTFILE_LIBRARY": "1"},
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    from labctl.data.recipes import node_packages

    assert result.stdout.split() == [
        str(site / "labctl/data/topologies/two-node.yaml"), "two-node", "siw-pair",
        str(len(node_packages())), str(site / "labctl/nodeside/node-init.sh"), "true"]


def test_dependencies_and_extras() -> None:
    project = PYPROJECT["project"]
    deps = " ".join(project["dependencies"])
    extras = project["optional-dependencies"]
    assert "testinfra" not in deps and "matplotlib" not in deps
    assert any(d.startswith("matplotlib") for d in extras["plot"])
    # testinfra: the pytest plugin's extra, which the test suite's includes
    assert any(d.startswith("pytest-testinfra") for d in extras["pytest"])
    assert "labctl[pytest]" in extras["test"]
    assert "labctl[test,plot]" in extras["dev"]
    assert project["license"] == "MIT"  # an SPDX expression, not the deprecated table


# --- shipped topologies --------------------------------------------------------------------


def test_shipped_topologies_are_the_top_level_ones() -> None:
    names = catalog.shipped_names()
    assert names == sorted(p.stem for p in (REPO / "topologies").glob("*.yaml"))
    assert {"two-node", "siw-pair", "three-node-switch", "four-node"} <= set(names)
    for topology in catalog.shipped():
        assert topology.path.parent == data_path("topologies")
        assert load_lab(topology.path).nodes  # every shipped one is valid


def test_find_topology_by_name_path_or_neither(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert catalog.find_topology("two-node") == data_path("topologies", "two-node.yaml")
    (tmp_path / "two-node").write_text("name: mine\n")  # a file wins over a shipped name
    assert catalog.find_topology("two-node") == Path("two-node")
    mine = tmp_path / "lab.yaml"
    assert catalog.find_topology(str(mine)) == mine
    # A path that does not exist goes on as a path: reading it says what is wrong.
    assert catalog.find_topology("missing/lab.yaml") == Path("missing/lab.yaml")
    with pytest.raises(UsageError) as err:
        catalog.find_topology("two-nodes")
    assert "'two-nodes' is neither a topology file nor a shipped topology" in err.value.message
    assert err.value.hint is not None
    for name in catalog.shipped_names():
        assert name in err.value.hint


def test_validate_and_topologies_by_name_from_any_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli(monkeypatch, capsys, "validate", "siw-pair")
    assert code == 0
    assert out.startswith("lab siw-pair: 2 nodes, 1 segment, provider qemu")
    assert "rdma siw on eth1" in out
    code, out, err = run_cli(monkeypatch, capsys, "validate", "no-such-lab")
    assert code == 2
    assert ("shipped topologies: docker-two-node, four-node, multi-host, routed, siw-pair"
            in _flat(err))
    code, out, err = run_cli(monkeypatch, capsys, "topologies")
    assert code == 0, err
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in out.splitlines() if line.startswith("│")}
    assert rows["two-node"] == ["2", "rxe", "qemu", str(data_path("topologies", "two-node.yaml"))]
    assert rows["siw-pair"][:3] == ["2", "siw", "qemu"]
    assert rows["four-node"][0] == "4"
    assert rows["docker-two-node"][2] == "docker"


def test_up_takes_a_shipped_name_from_any_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`labctl up two-node` in an empty directory gets the shipped file's lab (the provider
    is replaced: it records the lab and refuses to boot anything)."""
    import labctl.lab.lifecycle as up_module
    from labctl.errors import LabctlError

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "labs"))
    seen = []

    def provider_for(lab: Any, labdir: Any) -> None:
        seen.append(lab)
        raise LabctlError("no booting in unit tests")

    monkeypatch.setattr(up_module, "provider_for", provider_for)
    code, _, err = run_cli(monkeypatch, capsys, "up", "siw-pair", "--accel", "tcg")
    assert code == 1 and "no booting in unit tests" in err
    (lab,) = seen
    assert (lab.name, lab.source) == ("siw-pair", str(data_path("topologies", "siw-pair.yaml")))
    assert [n.rdma for n in lab.nodes] == ["siw", "siw"]


def test_up_of_an_unknown_name_is_refused_before_anything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "labs"))
    code, _, err = run_cli(monkeypatch, capsys, "up", "tow-node")
    assert code == 2
    assert "Traceback" not in err
    assert "'tow-node' is neither a topology file nor a shipped topology" in _flat(err)
    assert not (tmp_path / "labs").exists()


# --- version ---------------------------------------------------------------------------------


def test_version_comes_from_the_package_metadata(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert version() == importlib.metadata.version("labctl") == labctl.__version__
    code, out, _ = run_cli(monkeypatch, capsys, "--version")
    assert (code, out) == (0, f"labctl {labctl.__version__}\n")


# --- completion ----------------------------------------------------------------------------


@dataclasses.dataclass
class FakeContext:
    params: dict[str, Any]


@pytest.fixture
def two_labs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "labs"
    monkeypatch.setenv("LABCTL_STATE_DIR", str(state))
    lab = load_lab(REPO / "topologies/three-node-switch.yaml")
    LabDir("ut-three", root=state).create(dataclasses.replace(lab, name="ut-three"))
    lab = load_lab(REPO / "topologies/two-node.yaml")
    LabDir("ut-two", root=state).create(dataclasses.replace(lab, name="ut-two"))
    return state


def test_completion_of_labs_nodes_and_endpoints(two_labs: Path) -> None:
    assert complete.lab_names("") == ["ut-three", "ut-two"]
    assert complete.lab_names("ut-tw") == ["ut-two"]
    # Nodes of the lab chosen with --lab; with two labs up and none chosen: nothing.
    assert complete.node_names(FakeContext({"lab": "ut-three"}), "") == ["node1", "node2", "node3"]
    assert complete.node_names(FakeContext({"lab": "ut-two"}), "node2") == ["node2"]
    assert complete.node_names(FakeContext({}), "") == []
    assert complete.endpoints(FakeContext({"lab": "ut-two"}), "node1") == ["node1:eth1"]
    # The only lab up is the default.
    LabDir("ut-three", root=two_labs).remove()
    assert complete.node_names(FakeContext({"lab": None}), "n") == ["node1", "node2"]


def test_completion_of_topologies_and_choices(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mylab.yaml").write_text("name: x\n")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "labs").mkdir()
    (tmp_path / "labs" / "big.yml").write_text("")
    assert complete.topologies("") == [*catalog.shipped_names(), "labs/", "mylab.yaml"]
    assert complete.topologies("t") == ["three-node-switch", "two-node"]
    assert complete.topologies("labs/") == ["labs/big.yml"]
    assert complete.choices("auto", "kvm", "tcg")("k") == ["kvm"]


def test_completion_callbacks_never_raise(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "labs"
    (broken / "ut-bad").mkdir(parents=True)
    (broken / "ut-bad" / "lab.json").write_text("{not json")
    monkeypatch.setenv("LABCTL_STATE_DIR", str(broken))
    assert complete.node_names(FakeContext({"lab": "ut-bad"}), "") == []
    assert complete.endpoints(FakeContext({"lab": "../../etc"}), "") == []
    assert complete.node_names(None, "") == []  # type: ignore[arg-type]
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path / "a-file"))
    (tmp_path / "a-file").write_text("")
    assert complete.lab_names("") == []
    monkeypatch.chdir(tmp_path)
    assert complete.topologies("no/such/dir/x") == []


def test_shell_completion_through_the_real_entry_point(two_labs: Path, tmp_path: Path) -> None:
    """What bash gets on <TAB>: typer's completion protocol, run as a process."""
    entry = Path(sys.executable).parent / "labctl"
    if not entry.is_file():
        pytest.skip("no labctl script beside this Python (labctl not installed here)")

    def tab(*words: str) -> list[str]:
        env = {**os.environ, "_LABCTL_COMPLETE": "complete_bash",
               "COMP_WORDS": " ".join(["labctl", *words]), "COMP_CWORD": str(len(words))}
        result = subprocess.run([str(entry)], env=env, cwd=tmp_path, capture_output=True,
                                text=True, timeout=60, check=False)
        assert "Traceback" not in result.stderr
        return result.stdout.split()

    assert tab("up", "two") == ["two-node"]
    assert tab("up", "--accel", "") == ["auto", "kvm", "tcg"]
    assert tab("exec", "--lab", "ut-two", "node") == ["node1", "node2"]
    assert tab("status", "--lab", "ut-th") == ["ut-three"]
    assert tab("run", "pingpong", "--transport", "u") == ["uc", "ud"]
    assert tab("run", "perftest", "ib_send") == ["ib_send_lat", "ib_send_bw"]


def test_completion_can_be_installed(monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, "--help")
    assert code == 0
    assert "--install-completion" in out and "--show-completion" in out


# --- help text -------------------------------------------------------------------------------

COMMANDS = [["up"], ["down"], ["status"], ["exec"], ["run", "pingpong"], ["run", "rping"],
            ["run", "perftest"], ["run", "mckey"], ["run", "all"], ["bench"], ["validate"],
            ["schema"], ["devices"], ["devinfo"], ["asyncwatch"], ["link", "set"],
            ["image", "build"], ["image", "list"], ["doctor"], ["docker-host", "up"],
            ["topologies"], []]


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) or "labctl" for c in COMMANDS])
def test_help_has_no_type_noise(command: list[str], monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = run_cli(monkeypatch, capsys, *command, "--help")
    assert code == 0, err
    assert re.findall(r"<(?:bool|str|int|float|path|text)>", out) == []


def test_choice_options_show_their_choices(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    _, out, _ = run_cli(monkeypatch, capsys, "up", "--help")
    assert re.search(r"--accel +\[auto\|kvm\|tcg\]", out)
    assert re.search(r"--provider +\[qemu\|docker\|vagrant\]", out)
    assert re.search(r"--engine +\[vm\|local\]", out)
    assert re.search(r"--timeout +SECONDS", out)
    assert "labctl up [OPTIONS] TOPOLOGY" in out  # required: bare, as README writes it
    _, out, _ = run_cli(monkeypatch, capsys, "run", "pingpong", "--help")
    assert re.search(r"--transport +\[rc\|uc\|ud\|srq\]", out)


# --- the plot extra --------------------------------------------------------------------------


def test_bench_plot_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Said before any lab is touched (no lab is up here), exit 2, no traceback."""
    monkeypatch.setenv("LABCTL_STATE_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails
    code, _, err = run_cli(monkeypatch, capsys, "bench", "--plot", str(tmp_path / "b.png"))
    assert code == 2
    assert "Traceback" not in err
    assert "--plot needs matplotlib" in err
    assert "pip install 'labctl[plot]'" in err
    assert list(tmp_path.iterdir()) == []


# --- node side and setup.sh ------------------------------------------------------------------


def test_node_commands_script_changes_nothing_off_a_node(tmp_path: Path) -> None:
    if Path("/etc/labctl/node.env").exists():
        pytest.skip("this machine looks like a lab node")
    script = REPO / "labctl/nodeside/node-commands.sh"
    result = subprocess.run(["sh", str(script), str(tmp_path)], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 1
    assert "not a labctl node" in result.stderr
    assert not Path("/usr/local/bin/labctl-devinfo").exists()
    assert not Path("/usr/lib/python3/dist-packages/labctl-node.pth").exists()


def test_node_start_scripts_install_the_node_commands() -> None:
    line = "sh /opt/labctl/labctl/nodeside/node-commands.sh"
    text = (REPO / "labctl/nodeside/node-init.sh").read_text()
    assert line in text
    # before the ready line: a node that is ready has the commands
    assert text.index(line) < text.index('say "ready')
    # containers and Vagrant nodes run that same script
    assert "nodeside/node-init.sh" in (REPO / "labctl/nodeside/container-init.sh").read_text()
    assert "nodeside/node-init.sh" in (REPO / "labctl/providers/vagrant_plan.py").read_text()


def _setup_functions() -> str:
    text = (REPO / "scripts/setup.sh").read_text()
    return "\n".join(re.findall(r"^(?:installed|available)\(\) \{\n.*?^\}$", text, re.M | re.S))


def test_setup_optional_package_check_survives_sigpipe(tmp_path: Path) -> None:
    """`apt-cache policy X | grep -q` under pipefail failed when grep stopped reading early
    and apt-cache died of SIGPIPE. A long-winded fake apt-cache makes that certain."""
    functions = _setup_functions()
    assert "installed()" in functions and "available()" in functions
    fake = tmp_path / "apt-cache"
    fake.write_text("#!/bin/sh\necho \"$2:\"\necho '  Installed: (none)'\n"
                    "echo '  Candidate: 2.3.4+dfsg-1'\n"
                    "i=0; while [ $i -lt 20000 ]; do echo '     500 http://mirror x/main'; "
                    "i=$((i+1)); done\n")
    fake.chmod(0o755)
    none = tmp_path / "none"
    none.mkdir()
    (none / "apt-cache").write_text("#!/bin/sh\necho \"$2:\"\necho '  Candidate: (none)'\n")
    (none / "apt-cache").chmod(0o755)
    script = (f"set -euo pipefail\n{functions}\n"
              f"PATH={tmp_path}:$PATH available vagrant && echo yes || echo no\n"
              f"PATH={none}:$PATH available vagrant && echo yes || echo no\n")
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False,
                            timeout=60)
    assert result.stdout.split() == ["yes", "no"], result.stderr
