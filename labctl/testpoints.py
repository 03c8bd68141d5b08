"""Test-only fault injection: make `labctl up` fail at a named step, on purpose.

`LABCTL_FAULT=STEP[@NODE][:MODE]` makes the labctl process that reaches `fault_point(STEP)`
fail there (per-node steps only for NODE when given). MODE says how:

  raise   an unexpected exception (InjectedFault), as a bug in labctl would (default)
  int     SIGINT to itself: Ctrl-C at exactly that point
  kill    SIGKILL to itself: labctl dies at once, no cleanup code runs
  hold    wait there (holding the lab's lock) until the file LABCTL_FAULT_RELEASE names
          exists, at most HOLD_SECONDS, then go on: a test sees an `up` half-way however
          fast the host brings the nodes up (a restored two-node lab is up in 2.6 s)

Unset (always, outside tests), each point costs one environment lookup. The steps, in the
order `up` reaches them, are STEPS; tests/integration/test_reliability_lifecycle.py injects
each one and checks that `labctl status` is honest and `labctl down` removes everything.
"""

from __future__ import annotations

import os
import signal
import time

ENV = "LABCTL_FAULT"
RELEASE_ENV = "LABCTL_FAULT_RELEASE"
HOLD_SECONDS = 120.0
MODES = ("raise", "int", "kill", "hold")
STEPS = (
    "image",  # node image built or found in the cache; nothing made but state.json (creating)
    "state",  # state.json records the accelerator; no key, netns or node yet
    "netns",  # the lab's network namespace exists, no bridge yet
    "bridges",  # every bridge exists, no node yet
    "disk",  # per node: its disk overlay exists, its initrd not yet
    "qemu-started",  # per node: qemu runs, its pid not yet recorded in state.json
    "launched",  # per node: qemu runs and its pid is recorded
    "booted",  # every node reported ready; ssh masters may still be opening
    "master",  # per node: its ssh master runs
)


class InjectedFault(RuntimeError):
    """The failure LABCTL_FAULT asked for."""


def parse(spec: str) -> tuple[str, str | None, str]:
    """"STEP[@NODE][:MODE]" -> (step, node or None, mode)."""
    target, _, mode = spec.partition(":")
    step, _, node = target.partition("@")
    return step, node or None, mode or "raise"


def fault_point(step: str, node: str | None = None) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    want_step, want_node, mode = parse(spec)
    if want_step != step or (want_node is not None and want_node != node):
        return
    where = step + (f"@{node}" if node else "")
    if mode == "hold":
        release = os.environ.get(RELEASE_ENV, "")
        deadline = time.monotonic() + HOLD_SECONDS
        while release and not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.05)
        return
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "int":
        os.kill(os.getpid(), signal.SIGINT)  # KeyboardInterrupt, raised before the next line
        return
    raise InjectedFault(f"fault injected at {where} ({ENV}={spec})")
