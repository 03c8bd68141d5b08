"""Every `labctl run ...` line of docs/learning-path.md, run against the shared rxe lab.

Lines that name their own lab (`--lab siw-pair`: the iWARP step) are left to
test_siw.py, which runs the same programs on a siw pair. A bare `labctl run EXAMPLE`
line (no option: `run udaddy`) is the run that test_examples.py's `run all` makes of that
example on the same lab, at the same defaults, with more checks of its record (every
variant passed, its figures): it is not run a second time here. Each other line runs as
written plus `--lab` (and `--json`, to read the record) and must pass.
"""

from __future__ import annotations

import json

import pytest

from labctl.lab.handle import LabHandle
from tests.integration.conftest import LAB_NAME, labctl, only_record
from tests.integration.test_examples import ON_RXE
from tests.unit.test_learning_path import run_commands

pytestmark = pytest.mark.integration

# what test_examples' `run all` runs, at the examples' defaults (all of it but the
# pingpongs' and perftests' -n)
RUN_ALL_DEFAULTS = {name for name, _variant in ON_RXE} - {"pingpong", "perftest"}
LINES = [words for words in run_commands() if "--lab" not in words
         and not (len(words) == 2 and words[1] in RUN_ALL_DEFAULTS)]


@pytest.mark.parametrize("words", LINES, ids=[" ".join(w) for w in LINES])
def test_learning_path_line_passes(lab_handle: LabHandle, words: list[str]) -> None:
    if words == ["run", "list"]:  # runs nothing, takes no --lab
        result = labctl(*words, "--json", timeout=120)
        assert result.returncode == 0, result.stderr
        rows = json.loads(result.stdout)["examples"]
        assert {row["example"] for row in rows} >= {"rdma-server", "ucx", "rdma-core-tests"}
        return
    args = [*words, "--lab", LAB_NAME] + ([] if "--json" in words else ["--json"])
    result = labctl(*args, timeout=600)
    assert result.returncode == 0, f"labctl {' '.join(args)}\n{result.stdout}\n{result.stderr}"
    record = only_record(result.stdout)
    assert record["status"] == "passed", record
    if "--capture" in words:
        assert record["capture"]["opcodes"], record["capture"]
