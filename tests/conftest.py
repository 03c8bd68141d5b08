"""Shared by the unit and the integration tests."""

from __future__ import annotations

import os
import signal

# pytest-xdist's workers (scripts/test.sh runs the unit tests in two) inherit COLUMNS=80 and
# LINES=24 from their controller's C environment: GNU readline, once imported there, exports
# the terminal size it assumed. A serial run's tests see neither. Rich reads a COLUMNS that is
# set once, when a console is made (labctl.cli.common's, at import), and keeps that width for
# good: a test's monkeypatch.setenv("COLUMNS", ...) would not widen it, and a long tmp_path
# (a worker's is longer) folds inside an error message. Give the workers a serial run's
# environment.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)


def pytest_configure() -> None:
    # A shell that starts us in the background without job control (`cmd &` in a script,
    # nohup) leaves SIGINT ignored, and an ignored signal stays ignored in every program
    # started from here: the Ctrl-C tests (`labctl up` interrupted, the fault points' "int")
    # would then test nothing. Give this process, and so its children, the normal Ctrl-C.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
