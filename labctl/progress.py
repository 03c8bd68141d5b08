"""How long-running steps report progress: a callable that takes one line."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]
