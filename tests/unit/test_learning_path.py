"""docs/learning-path.md: the course's steps in order, each with its labctl command.

test_docs.py checks every command line against the CLI; this checks the page teaches the
steps in the course's order and names every example; tests/integration/
test_learning_path.py runs its `labctl run` lines against a live lab.
"""

from __future__ import annotations

import shlex

from labctl.runners.examples import TEACHES
from tests.unit.test_docs import ROOT, extract

PAGE = ROOT / "docs" / "learning-path.md"

# The course's order: the first command of each step, as the page writes it (prefix).
STEPS = [
    "labctl run pingpong --transport rc",
    "labctl asyncwatch",
    "labctl run pingpong --transport ud",
    "labctl run pingpong --transport uc",
    "labctl run rdma-server",
    "labctl run rping",
    "labctl devices",
    "labctl devinfo",
    "labctl run mckey",
]


def commands() -> list[str]:
    return [c.text for c in extract(PAGE)]


def run_commands() -> list[list[str]]:
    """The page's `labctl run ...` lines as argv (after `labctl`), in order, once each."""
    seen: list[list[str]] = []
    for text in commands():
        words = shlex.split(text)[1:]
        if words[:1] == ["run"] and len(words) > 1 and words not in seen:
            seen.append(words)
    return seen


def test_steps_in_course_order() -> None:
    texts = commands()
    positions = []
    for step in STEPS:
        matches = [i for i, text in enumerate(texts) if text.startswith(step)]
        assert matches, f"no command for step {step!r}"
        positions.append(matches[0])
    assert positions == sorted(positions)


def test_roce_v2_and_iwarp_steps() -> None:
    text = PAGE.read_text()
    assert "RoCE v2 is routable UDP/IP; RoCE v1 is not" in text
    assert "iWARP runs over TCP" in text
    assert "--capture" in text and "(wire.md)" in text


def test_every_example_is_on_the_path() -> None:
    named = {words[1] for words in run_commands()}
    # the workloads (qperf, fabric) are in docs/workloads.md, beyond the path
    assert set(TEACHES) - {"perftest", "qperf", "fabric"} <= named | {"list"}
    assert "list" in named and "perftest" in named


def test_run_commands_are_extracted() -> None:
    runs = run_commands()
    assert ["run", "rdma-server", "--show-output"] in runs
    assert ["run", "rping", "--count", "5", "--show-output"] in runs
    assert len(runs) >= 15


def test_the_steps_that_say_look_at_closing_lines_print_them() -> None:
    """A passed run prints its table only: a step that sends the reader to the programs'
    own lines (`rdma_server: end 0`, `ping data: ...`) runs with --show-output."""
    runs = run_commands()
    for example in ("rdma-server", "rping"):
        mine = [w for w in runs if w[1] == example and "--lab" not in w and "--json" not in w]
        assert mine and all("--show-output" in w for w in mine), mine


def test_routed_step_runs_pingpong_and_rping_on_the_routed_lab() -> None:
    """tests/integration/test_routed.py runs these lines on a live routed lab."""
    routed = [w for w in run_commands() if w[-2:] == ["--lab", "routed"]]
    assert {w[1] for w in routed} == {"pingpong", "rping"}
    assert all("--capture" in w and "--json" in w for w in routed)
    assert "labctl up routed" in commands()
