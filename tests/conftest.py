"""Shared by the unit and the integration tests."""

from __future__ import annotations

import signal


def pytest_configure() -> None:
    # A shell that starts us in the background without job control (`cmd &` in a script,
    # nohup) leaves SIGINT ignored, and an ignored signal stays ignored in every program
    # started from here: the Ctrl-C tests (`labctl up` interrupted, the fault points' "int")
    # would then test nothing. Give this process, and so its children, the normal Ctrl-C.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
