"""docs/cli.md is what scripts/cli-reference.py writes from the CLI itself: a new command or
option (or a changed help text) without a regenerated page fails here. Regenerate with
`.venv/bin/python scripts/cli-reference.py` and commit docs/cli.md."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cli-reference.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cli_reference", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REFERENCE = _load()
TEXT = REFERENCE.render()
COMMANDS: list[tuple[tuple[str, ...], Any]] = list(REFERENCE.walk(REFERENCE.root_command()))


def test_docs_cli_md_is_up_to_date() -> None:
    assert (ROOT / "docs" / "cli.md").read_text() == TEXT, (
        "docs/cli.md is stale: run `.venv/bin/python scripts/cli-reference.py` and commit it")


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_each_command_has_its_section_usage_options_and_example(path: tuple[str, ...],
                                                                command: Any) -> None:
    title = f"## {' '.join(path)}\n"
    assert title in TEXT
    section = TEXT.split(title, 1)[1].split("\n## ", 1)[0]
    assert f"```\nUsage: {' '.join(path)} " in section  # the usage line
    if getattr(command, "commands", None) and path != ("labctl",):
        return  # a group: its commands have the sections
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        if param.param_type_name == "option":
            long_name = sorted(param.opts + param.secondary_opts,
                               key=lambda o: not o.startswith("--"))[0]
            assert f"`{long_name}" in section, f"{' '.join(path)}: {long_name} not described"
        else:
            assert f"`{param.metavar}".replace("|", "\\|") in section
    if path != ("labctl",):
        example = section.split("Example:\n\n```sh\n", 1)[1].split("\n", 1)[0]
        assert example.startswith(" ".join(path))
        assert not example.endswith("--help"), f"{' '.join(path)} has no example"


def test_the_script_checks_and_refuses_unknown_arguments(tmp_path: Path) -> None:
    check = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                           text=True, timeout=120, check=False)
    assert check.returncode == 0, check.stderr
    wrong = subprocess.run([sys.executable, str(SCRIPT), "--chek"], capture_output=True,
                           text=True, timeout=120, check=False)
    assert wrong.returncode == 2 and "usage: scripts/cli-reference.py [--check]" in wrong.stderr


def test_examples_come_from_the_docs_not_from_this_page() -> None:
    examples = REFERENCE.doc_examples()
    assert examples[("labctl", "up")].startswith("labctl up ")
    assert all("..." not in e and "NODE" not in e for e in examples.values())
