#!/usr/bin/env python3
"""Count the CLI's imports of the rest of labctl, per part: how many of labctl's other parts
it imports, and its module-to-module imports of each (any import in a module, function-level
ones too, as tests/unit/test_import_graph.py reads them). The parts behind the lab service
(tests/unit/test_layers.py's BEHIND_THE_LAB_SERVICE) are the ones the CLI reaches only
through its listed doors.

    .venv/bin/python scripts/cli-imports.py
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.unit.test_import_graph import import_graph
from tests.unit.test_layers import BEHIND_THE_LAB_SERVICE, part


def main() -> None:
    graph = import_graph()
    edges = Counter(part(t) for s, targets in graph.items() if part(s) == "cli"
                    for t in targets if part(t) not in ("cli", "labctl"))
    others = {part(m) for m in graph} - {"cli", "labctl", "__main__"}
    print(f"the CLI imports {len(edges)} of labctl's {len(others)} other parts, "
          f"{sum(edges.values())} module imports")
    behind = {p: edges[p] for p in sorted(BEHIND_THE_LAB_SERVICE) if edges[p]}
    print(f"behind the lab service: {sum(behind.values())} ("
          + ", ".join(f"{p} {n}" for p, n in behind.items()) + ")")
    print("per part: " + ", ".join(f"{p} {n}" for p, n in edges.most_common()))


if __name__ == "__main__":
    main()
