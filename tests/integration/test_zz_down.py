"""Runs last: `labctl down` removes every trace of the shared lab, and is idempotent."""

from __future__ import annotations

import pytest

from labctl.lab.handle import LabHandle
from tests.integration.conftest import LAB_NAME, labctl
from tests.integration.leftovers import lab_leftovers

pytestmark = pytest.mark.integration


def test_down_leaves_nothing_behind(lab_handle: LabHandle) -> None:
    before = lab_leftovers(LAB_NAME)
    assert before["netns"] and len(before["qemu"]) == 2 and before["labdir"]
    result = labctl("down", "--lab", LAB_NAME, check=True)
    assert "removed" in result.stdout
    assert lab_leftovers(LAB_NAME) == {"netns": [], "qemu": [], "ssh": [], "labdir": []}
    again = labctl("down", "--lab", LAB_NAME, check=True)
    assert "nothing to remove" in again.stdout
