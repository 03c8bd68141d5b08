"""A lab on a kernel of the user's own, live: a mixed two-node lab, node1 on the image's
kernel and node2 on Debian's trixie kernel (6.12, a folder shaped as `make modules_install`
leaves it, see kernelpkg.py). RC pingpong across the two kernels, each node's modules those
of its own kernel, and `status` naming both."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from labctl.data.recipes import node_recipe
from labctl.images.builder import build_image
from tests.integration.conftest import REPO, labctl, passed_run
from tests.integration.kernelpkg import fetch_other_kernel
from tests.integration.modulelab import ModuleLab, module_lab

pytestmark = pytest.mark.integration
KERNEL_LAB = os.environ.get("LABCTL_TEST_KERNEL_LAB", "itest-kernel")


@pytest.fixture(scope="module")
def other_kernel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    image = build_image(node_recipe("trixie", ()))
    return fetch_other_kernel(image, tmp_path_factory.mktemp("kernel"))


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory, other_kernel: Path) -> Path:
    data = yaml.safe_load((REPO / "topologies" / "two-node.yaml").read_text())
    data["name"] = KERNEL_LAB
    data["nodes"]["node2"] = {**(data["nodes"].get("node2") or {}), "kernel": str(other_kernel)}
    path = tmp_path_factory.mktemp("kernel-topology") / "two-kernels.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


kernel_lab = module_lab(KERNEL_LAB)


def test_pingpong_across_two_kernels(kernel_lab: ModuleLab) -> None:
    record = passed_run(kernel_lab.name, "pingpong")
    assert {record["server"], record["client"]} == {"node1", "node2"}


def test_status_names_each_nodes_kernel_and_its_source(kernel_lab: ModuleLab,
                                                        other_kernel: Path) -> None:
    status = labctl("status", "--lab", kernel_lab.name, "--json", check=True, timeout=120)
    kernels = {n["name"]: n["kernel"] for n in json.loads(status.stdout)["labs"][0]["nodes"]}
    image_release = kernel_lab.handle.run("node1", ["uname", "-r"], timeout=60).stdout.strip()
    (other_release,) = [d.name for d in (other_kernel / "usr/lib/modules").iterdir()]
    assert kernels == {"node1": {"source": "image", "release": image_release},
                       "node2": {"source": str(other_kernel), "release": other_release}}
    assert image_release != other_release


def test_node_on_its_own_kernel_loads_that_kernels_modules(kernel_lab: ModuleLab) -> None:
    """node2's rdma_rxe comes from the kernel's modules disk, mounted read-only where
    modprobe looks."""
    script = ('r=$(uname -r); mount | grep " /usr/lib/modules/$r "; '
              'modinfo -F vermagic rdma_rxe')
    out = kernel_lab.handle.run("node2", ["sh", "-c", script], timeout=60).stdout
    release = kernel_lab.handle.run("node2", ["uname", "-r"], timeout=60).stdout.strip()
    assert f"/dev/vdb on /usr/lib/modules/{release} type ext4 (ro" in out
    assert out.splitlines()[-1].startswith(release + " ")
