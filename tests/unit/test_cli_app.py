"""The CLI's entry point: every command module is registered (none skipped on an import
error), and every command prints a failure the same way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from labctl.cli import app as app_module

REPO = Path(__file__).resolve().parents[2]


def test_every_command_module_is_registered() -> None:
    source = (REPO / "labctl/cli/app.py").read_text()
    assert "ModuleNotFoundError" not in source and "continue" not in source
    names = {c.name or (c.callback.__name__ if c.callback else "")
             for c in app_module.app.registered_commands}
    groups = {g.name for g in app_module.app.registered_groups}
    assert {"up", "down", "status", "exec", "validate", "devices", "devinfo",
            "asyncwatch", "doctor"} <= names
    assert {"image", "link", "docker-host", "run"} <= groups | names


@pytest.mark.parametrize("args", [["devinfo", "--lab", "nolab"], ["status", "--lab", "nolab"],
                                  ["exec", "--lab", "nolab", "node1", "--", "true"]])
def test_errors_print_one_way(args: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "LABCTL_STATE_DIR": str(tmp_path), "COLUMNS": "200"}
    result = subprocess.run([sys.executable, "-m", "labctl", *args], capture_output=True,
                            text=True, env=env, check=False)
    assert result.returncode != 0
    lines = result.stderr.splitlines()
    assert lines[0] == "error: no lab named 'nolab' is up", result.stderr
    assert lines[1].startswith("hint: ")
    assert "Traceback" not in result.stderr
