"""labctl as a user installs it: the wheel, in a fresh virtualenv outside the checkout, run
from an empty directory; one live two-node lab from the shipped topology.

The lab is named after LABCTL_TEST_LAB with "-pkg" (the session's lab is LABCTL_TEST_LAB
itself); it is the module's own (modulelab, with the wheel's labctl), removed at the end
whatever happens, and checked to leave nothing. Installing the wheel fetches its
dependencies through pip from the configured package index (pip's cache makes it quick).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import labctl
from tests.integration.conftest import only_record
from tests.integration.modulelab import ModuleLab, module_lab

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
LAB = (os.environ.get("LABCTL_TEST_LAB", "itest") + "-pkg")[:20]


@dataclass
class Installed:
    venv: Path
    work: Path  # an empty directory outside the checkout: the commands run there

    def run(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(PATH=f"{self.venv / 'bin'}:{env.get('PATH', '')}", COLUMNS="200")
        return subprocess.run([str(self.venv / "bin" / args[0]), *args[1:]], cwd=self.work,
                              env=env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)

    def labctl(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return self.run("labctl", *args, timeout=timeout)


def _must(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.args, result.stdout, result.stderr)
    return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    started = time.monotonic()
    dist = tmp_path_factory.mktemp("dist")
    # Built from a clean copy of the tree: setuptools leaves build/ behind, and a stale
    # build/lib of an earlier run could slip deleted files into the wheel.
    source = tmp_path_factory.mktemp("source") / "rdma-lab"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"))
    # No build isolation: the dev extra brings setuptools>=77, so nothing is downloaded here.
    _must(subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                          "--no-build-isolation", "-w", str(dist), str(source)],
                         capture_output=True, text=True, timeout=600, check=False))
    (wheel,) = dist.glob("labctl-*.whl")
    assert wheel.name == f"labctl-{labctl.__version__}-py3-none-any.whl"
    venv = tmp_path_factory.mktemp("venv")
    _must(subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)],
                         capture_output=True, text=True, timeout=300, check=False))
    _must(subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)],
                         capture_output=True, text=True, timeout=600, check=False))
    work = tmp_path_factory.mktemp("work")
    print(f"wheel built and installed in {time.monotonic() - started:.1f} s")
    return Installed(venv, work)


def test_the_installed_package_is_the_wheel(installed: Installed) -> None:
    where = _must(installed.run("python", "-c", "import labctl; print(labctl.__file__)"))
    assert where.startswith(str(installed.venv)), where
    assert not where.startswith(str(REPO))
    # Dependencies as declared: no test or plot extras in a plain install.
    probe = ("import importlib.util as u; "
             "print([m for m in ('testinfra', 'matplotlib', 'typer', 'pydantic') "
             "if u.find_spec(m)])")
    assert _must(installed.run("python", "-c", probe)).strip() == "['typer', 'pydantic']"


def test_version_validate_schema_doctor_from_elsewhere(installed: Installed) -> None:
    assert _must(installed.labctl("--version")) == f"labctl {labctl.__version__}\n"
    out = _must(installed.labctl("validate", "two-node"))
    assert out.startswith("lab two-node: 2 nodes, 1 segment, provider qemu (from ")
    assert "node1  rdma rxe on eth1" in out and "10.77.1.2/24" in out
    assert _must(installed.labctl("validate", "siw-pair")).startswith("lab siw-pair:")
    bad = installed.labctl("validate", "no-such-topology")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "two-node" in bad.stderr and "siw-pair" in bad.stderr
    assert _must(installed.labctl("schema")) == (REPO / "topologies/schema.json").read_text()
    listing = _must(installed.labctl("topologies"))
    assert "two-node" in listing and str(installed.venv) in listing
    doctor = installed.labctl("doctor")
    assert "Traceback" not in doctor.stderr
    assert "qemu tools" in doctor.stdout and "qemu provider:" in doctor.stdout
    plot = installed.labctl("bench", "--plot", "x.png")
    assert plot.returncode == 2 and "pip install 'labctl[plot]'" in plot.stderr


def test_the_wheel_builds_the_same_node_image_as_the_checkout(installed: Installed) -> None:
    """Same build inputs, same cache key: an installed labctl reuses the cached image."""
    probe = ("from labctl.images.builder import image_dir; from labctl.data.recipes import "
             "recipe; print(image_dir(recipe('trixie')).name)")
    ours = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, cwd=REPO).stdout
    assert _must(installed.run("python", "-c", probe)) == ours


@pytest.fixture(scope="module")
def topology(installed: Installed) -> Path:
    """The shipped two-node topology, as the wheel has it, under this module's lab name."""
    shipped = _must(installed.run("python", "-c", "from labctl.topology.catalog import "
                                  "find_topology; print(find_topology('two-node'))")).strip()
    text = Path(shipped).read_text()
    assert "name: two-node" in text
    path = installed.work / "pkg-lab.yaml"
    path.write_text(text.replace("name: two-node", f"name: {LAB}"))
    return path


# Up and down by the wheel's labctl.
pkg_lab = module_lab(LAB, labctl_from="installed")


@pytest.fixture(scope="module")
def lab(pkg_lab: ModuleLab) -> str:
    return pkg_lab.name


def test_live_pingpong_from_the_wheel(installed: Installed, pkg_lab: ModuleLab) -> None:
    assert f"lab {LAB} is up" in pkg_lab.up.stdout
    lab = pkg_lab.name
    out = _must(installed.labctl("run", "pingpong", "--lab", lab, "--json", timeout=300))
    record = only_record(out)
    assert record["status"] == "passed", record
    assert record["figures"]["usec_per_iter"] > 0


def test_node_shell_commands_match_the_c_tools(installed: Installed, lab: str) -> None:
    def node(*argv: str) -> subprocess.CompletedProcess[str]:
        return installed.labctl("exec", "--lab", lab, "node1", "--", *argv, timeout=300)

    for args in ([], ["-v"]):
        c_tool = node("ibv_devinfo", *args)
        assert c_tool.returncode == 0 and "rxe0" in c_tool.stdout
        ours = node("labctl-devinfo", *args)
        assert (ours.returncode, ours.stdout) == (0, c_tool.stdout), ours.stderr
        module = node("python3", "-m", "labctl.verbs", "devinfo", *args)  # no PYTHONPATH
        assert (module.returncode, module.stdout) == (0, c_tool.stdout), module.stderr
        via_labctl = installed.labctl("devinfo", "--lab", lab, "node1", *args, timeout=300)
        assert via_labctl.stdout == c_tool.stdout
    assert node("labctl-devices").stdout == node("ibv_devices").stdout
    for args in (["-h"], ["-d", "nosuchdev0"]):
        c_tool, ours = node("ibv_asyncwatch", *args), node("labctl-asyncwatch", *args)
        assert (ours.returncode, ours.stdout, ours.stderr) == (
            c_tool.returncode, c_tool.stdout, c_tool.stderr)
