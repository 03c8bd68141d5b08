"""The Docker SDK, imported late (only docker labs need it)."""

from __future__ import annotations

import importlib
from typing import Any


def sdk() -> Any:
    """The `docker` module. Typed Any: the repository's docker/ directory looks like a
    namespace package `docker` to mypy."""
    return importlib.import_module("docker")
