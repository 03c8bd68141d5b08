"""A workload needs packages in both nodes' images: a node without them is refused before
anything runs (exit 2), with the images and the `packages:` key that have them."""

from __future__ import annotations

import dataclasses

import pytest

from labctl.errors import UsageError
from labctl.runners.example_spec import ExampleSpec
from labctl.runners.execute import check_image_packages
from labctl.topology.resolved import Node

SPEC = ExampleSpec(name="qperf", variant="", server_argv=lambda ctx: ["qperf"],
                   client_argv=lambda ctx: ["qperf"], parse=lambda out: {},
                   devices=frozenset({"rxe"}), packages=("qperf",))
NODE = Node(name="node1", index=1, rdma="rxe", memory_mib=512, cpus=1, image="trixie",
            interfaces=())


def test_a_node_whose_image_lacks_the_package_is_refused_naming_the_image() -> None:
    with pytest.raises(UsageError) as refused:
        check_image_packages(SPEC, NODE)
    assert refused.value.exit_code == 2
    assert refused.value.message == "qperf: node node1's image trixie lacks qperf"
    assert refused.value.hint is not None
    assert refused.value.hint.startswith("give the nodes image: trixie-workloads, or "
                                         "packages: [qperf] in the topology")


@pytest.mark.parametrize("node", [
    dataclasses.replace(NODE, image="trixie-workloads"),
    dataclasses.replace(NODE, packages=("qperf",)),  # the node's own `packages:`
    dataclasses.replace(NODE, image="a-vagrant-box-labctl-does-not-build"),
])
def test_an_image_with_the_package_or_one_labctl_does_not_build_passes(node: Node) -> None:
    assert check_image_packages(SPEC, node) is None


def test_an_example_that_needs_no_package_passes_on_any_image() -> None:
    assert check_image_packages(dataclasses.replace(SPEC, packages=()), NODE) is None
