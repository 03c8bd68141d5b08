"""A TCG qemu runs without transparent huge pages (labctl/vm/machine.py
inherit_thp): the setting is the kernel's, read back from a real child's /proc status."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from labctl.vm.machine import inherit_thp, uses_tcg

GOLDEN = Path(__file__).parent / "golden"


def _child_thp_enabled() -> str:
    status = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True,
                            check=True).stdout
    return next(line.split()[1] for line in status.splitlines()
                if line.startswith("THP_enabled:"))


def test_children_inherit_the_setting_through_exec() -> None:
    try:
        inherit_thp(enabled=False)
        assert _child_thp_enabled() == "0"
        inherit_thp(enabled=True)
        assert _child_thp_enabled() == "1"
    finally:
        inherit_thp(enabled=True)


def test_only_tcg_plans_are_tcg() -> None:
    for name, tcg in (("qemu-plan-two-node-tcg.json", True),
                      ("qemu-plan-two-node-kvm.json", False)):
        for node in json.loads((GOLDEN / name).read_text())["nodes"]:
            assert uses_tcg(node["argv"]) is tcg
    assert uses_tcg(["qemu-system-x86_64", "-m", "512"])  # qemu's default
