"""`labctl run all`: every catalogued example between two nodes, supported or skipped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from labctl.lab.handle import LabHandle
from labctl.runners.example_spec import ExampleSpec
from labctl.runners.examples import EXAMPLES, KNOWN_LIMITATIONS
from labctl.runners.execute import RunResult, missing_packages, run_example
from labctl.runners.pairs import ip_path, no_path_reason


def run_matrix(handle: LabHandle, server: str, client: str, options: dict[str, Any],
               progress: Callable[[RunResult], None] | None = None,
               run: Callable[[LabHandle, ExampleSpec, str, str, dict[str, Any]], RunResult]
               = run_example) -> list[RunResult]:
    """Run the catalogue in order; unsupported and known-limited cases come back skipped
    with their reason and are never started. `run` runs one (`run all --capture` wraps
    run_example in a capture)."""
    results: list[RunResult] = []
    no_path = "" if ip_path(handle.lab, server, client) is not None else no_path_reason(
        handle.lab, server, client)
    nodes = [n for n in handle.lab.nodes if n.name in (server, client)]
    for (name, variant), spec in EXAMPLES.items():
        # A workload whose programs the nodes' image lacks is skipped, not refused: the
        # matrix is what these nodes can run (docs/workloads.md runs them on their image).
        lacking = next((f"{r.message} ({r.hint})" for node in nodes
                        if (r := missing_packages(spec, node)) is not None), "")
        limitation = no_path or KNOWN_LIMITATIONS.get((name, variant)) or lacking
        if limitation:
            result = RunResult(name, variant, server, client, "skipped", reason=limitation,
                               key_figure=spec.key_figure)
        else:
            result = run(handle, spec, server, client, options)
        results.append(result)
        if progress:
            progress(result)
    return results
