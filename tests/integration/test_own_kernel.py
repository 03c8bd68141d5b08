"""A lab on a kernel other than the image's, live: a mixed two-node lab, node1 on the
image's kernel (trixie-backports' 7.x) and node2 on `kernel: debian:6.12`, trixie's own
series, which labctl fetches with the image's apt sources and unpacks into a folder shaped
as `make modules_install` leaves it. RC pingpong across the two kernels, each node's
modules those of its own kernel, and `status` naming both; a version Debian lacks is
refused before anything is made."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from labctl.images.debian_kernels import debian_root
from labctl.store.labdir import LabDir
from tests.integration.conftest import REPO, labctl, passed_run
from tests.integration.modulelab import ModuleLab, module_lab

pytestmark = pytest.mark.integration
KERNEL_LAB = os.environ.get("LABCTL_TEST_KERNEL_LAB", "itest-kernel")
OTHER_SERIES = "6.12"  # trixie's own; the image boots trixie-backports' 7.x


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = yaml.safe_load((REPO / "topologies" / "two-node.yaml").read_text())
    data["name"] = KERNEL_LAB
    data["nodes"]["node2"] = {**(data["nodes"].get("node2") or {}),
                              "kernel": f"debian:{OTHER_SERIES}"}
    path = tmp_path_factory.mktemp("kernel-topology") / "two-kernels.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


kernel_lab = module_lab(KERNEL_LAB)


def test_pingpong_across_two_kernels(kernel_lab: ModuleLab) -> None:
    record = passed_run(kernel_lab.name, "pingpong")
    assert {record["server"], record["client"]} == {"node1", "node2"}


def test_status_names_each_nodes_kernel_and_its_source(kernel_lab: ModuleLab) -> None:
    status = labctl("status", "--lab", kernel_lab.name, "--json", check=True, timeout=120)
    kernels = {n["name"]: n["kernel"] for n in json.loads(status.stdout)["labs"][0]["nodes"]}
    image_release = kernel_lab.handle.run("node1", ["uname", "-r"], timeout=60).stdout.strip()
    other_release = kernel_lab.handle.run("node2", ["uname", "-r"], timeout=60).stdout.strip()
    assert other_release.startswith(OTHER_SERIES + ".")
    assert not image_release.startswith(OTHER_SERIES + ".")
    # the debian: kernel is served from the folder it was unpacked in, named by release
    folder = Path(kernels["node2"]["source"])
    assert folder.parent == debian_root() and folder.name.startswith(other_release + "_")
    assert (folder / "usr/lib/modules" / other_release).is_dir()
    assert kernels == {"node1": {"source": "image", "release": image_release},
                       "node2": {"source": str(folder), "release": other_release}}


def test_node_on_its_own_kernel_loads_that_kernels_modules(kernel_lab: ModuleLab) -> None:
    """node2's rdma_rxe comes from the kernel's modules disk, mounted read-only where
    modprobe looks."""
    script = ('r=$(uname -r); mount | grep " /usr/lib/modules/$r "; '
              'modinfo -F vermagic rdma_rxe')
    out = kernel_lab.handle.run("node2", ["sh", "-c", script], timeout=60).stdout
    release = kernel_lab.handle.run("node2", ["uname", "-r"], timeout=60).stdout.strip()
    assert f"/dev/vdb on /usr/lib/modules/{release} type ext4 (ro" in out
    assert out.splitlines()[-1].startswith(release + " ")


def test_a_version_debian_lacks_is_refused_before_anything(kernel_lab: ModuleLab) -> None:
    """Asked after the lab's up: the apt indexes are in the cache, so this costs seconds."""
    name = f"{KERNEL_LAB}-bad"
    result = labctl("up", str(REPO / "topologies" / "two-node.yaml"), "--name", name,
                    "--kernel", "debian:5.4", timeout=300)
    assert result.returncode == 2, result.stderr
    assert ("error: debian:5.4: the node image's apt sources have no such kernel (they have "
            f"{OTHER_SERIES} (") in result.stderr
    assert "hint: debian:SERIES (debian:6.12)" in result.stderr
    assert not LabDir(name).exists()


# The lost-SEND fault lesson (docs/faults.md) as one matrix step: the fault on the client's
# link, a pingpong that must pass, and the sender's retry counted (its record's counters).
LOST_SEND_STEP = (
    "labctl fault add node2:eth1 drop --opcode send --nth 1 >/dev/null && "
    "labctl run pingpong -n 5 --json | {python} -c 'import json, sys; "
    "r = json.load(sys.stdin)[\"records\"][0]; c = r[\"counters\"][\"node2\"][\"rxe0/1\"]; "
    "sys.exit(0 if r[\"status\"] == \"passed\" and c.get(\"completer_retry_err\", 0) >= 1 "
    "else 1)'")


def test_matrix_runs_the_pingpong_and_a_fault_lesson_on_both_kernels(
        kernel_lab: ModuleLab) -> None:
    """`labctl matrix` over the image's kernel and debian:6.12 (both restored from their
    saved machines: the module's lab made 6.12's), the RC pingpong and the lost-SEND
    lesson passing on each, its lab taken down after each kernel."""
    name = f"{KERNEL_LAB}-mx"[:20]
    step = LOST_SEND_STEP.format(python=shlex.quote(sys.executable))
    result = labctl("matrix", "--kernels", f"image,debian:{OTHER_SERIES}", "--name", name,
                    "--step", "labctl run pingpong --iters 20", "--json",
                    str(REPO / "topologies" / "two-node.yaml"), "--", "sh", "-c", step,
                    timeout=900)
    table = json.loads(result.stdout)
    cells = {k["kernel"]: {c["step"]: (c["result"], c["reason"]) for c in k["cells"]}
             for k in table["kernels"]}
    assert result.returncode == 0 and table["passed"], cells
    assert list(cells) == ["image", f"debian:{OTHER_SERIES}"]
    assert all(len(row) == 3 and {r for r, _ in row.values()} == {"passed"}
               for row in cells.values()), cells
    releases = [k["release"] for k in table["kernels"]]
    assert releases[1].startswith(OTHER_SERIES + ".") and releases[0] != releases[1]
    assert not LabDir(name).exists()
