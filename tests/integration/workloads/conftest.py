"""The workloads lab (topologies/workloads.yaml): one lab that every workload test module
of this package shares, up once and down once (CI time: issue 30 groups the workloads in
one lab per provider). LABCTL_TEST_WORKLOADS_LAB names it (a lab per engineer)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.conftest import make_topology
from tests.integration.modulelab import module_lab

WORKLOADS_LAB = os.environ.get("LABCTL_TEST_WORKLOADS_LAB", "wl")


@pytest.fixture(scope="package")
def workloads_topology(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_topology(tmp_path_factory.mktemp("workloads"), "workloads.yaml", WORKLOADS_LAB)


workloads_lab = module_lab(WORKLOADS_LAB, "workloads_topology", scope="package")
