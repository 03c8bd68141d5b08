"""Run the labctl CLI in-process, as its entry point does, for the unit tests."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from labctl.cli.app import main


def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
             *args: str) -> tuple[int, str, str]:
    """`labctl ARGS...` through main(): its exit code (SystemExit's), stdout and stderr."""
    monkeypatch.setattr(sys, "argv", ["labctl", *args])
    capsys.readouterr()
    code: Any = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return (code if isinstance(code, int) else 1), out, err
