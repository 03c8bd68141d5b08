"""Where a docker lab's engine lives: the Docker host VM, or a local engine.

Both answer the same three questions: the engine's URL (for the Docker SDK and CLI), how
to run a node-side helper as root on the kernel that runs the containers (the link
plumbing of dockernet.py), and a name for messages. The choice is recorded in the lab's
state, so status and down reach the same engine later.

  vm      the Docker host VM (started on demand); the default, because it works on any
          host with qemu and its kernel has per-netns rxe
  local   the engine at DOCKER_HOST or /var/run/docker.sock, for hosts whose own kernel
          passes `labctl doctor`'s per-netns rxe probe

Chosen by `labctl up --engine vm|local` or LABCTL_DOCKER_ENGINE (not a topology key: the
engine is a property of the host running the lab, not of the lab).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from importlib import resources
from typing import Any

from labctl import bounded, hostproc
from labctl.capabilities import ENGINES
from labctl.dockerhost.sdk import sdk
from labctl.dockerhost.vm import DockerHostVM
from labctl.errors import LabctlError, UsageError
from labctl.node.replies import UnreadableReply, read_reply
from labctl.progress import Progress
from labctl.store.state import EngineState

SENT_HINT = ("`labctl doctor` checks the engine's host; `labctl down` removes what a lab "
             "made")


def reply_object(proc: subprocess.CompletedProcess[str], where: str, doing: str) -> dict[str, Any]:
    """The payload of a sent script's reply (labctl's reply format, read by the one
    reader: the engine's host runs others' containers), which must be an object."""
    payload = read_reply(proc, sender=where, doing=doing, hint=SENT_HINT)
    if not isinstance(payload, dict):
        raise UnreadableReply(where, f"a payload that is {bounded.json_kind(payload)}, "
                              "not an object", SENT_HINT)
    return payload


def helper_source() -> str:
    return resources.files("labctl.engineside").joinpath("dockernet.py").read_text()


def local_base_url() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


@dataclass(frozen=True)
class Engine:
    kind: str  # "vm" | "local"
    base_url: str

    @property
    def where(self) -> str:
        return "the Docker host VM" if self.kind == "vm" else "this host"

    def to_state(self) -> EngineState:
        return EngineState(self.kind, self.base_url)

    @classmethod
    def from_state(cls, data: EngineState) -> Engine:
        return cls(data.kind, data.base_url)

    def client(self, timeout: int = 120) -> Any:
        try:
            client = sdk().DockerClient(base_url=self.base_url, timeout=timeout)
            client.ping()
        except Exception as exc:  # the SDK raises many kinds
            hint = ("`labctl docker-host up` starts it" if self.kind == "vm"
                    else "start the Docker engine, or use `labctl up --engine vm`")
            raise LabctlError(f"the Docker engine of {self.where} ({self.base_url}) does not "
                              f"answer: {exc}", hint=hint) from None
        return client

    def reachable(self) -> bool:
        if self.kind == "vm":
            return DockerHostVM().engine_answers()
        try:
            self.client(timeout=10).close()
        except LabctlError:
            return False
        return True

    def helper(self, *args: str, timeout: float = 120) -> dict[str, Any]:
        """Run dockernet.py with `args` as root next to the engine; its JSON answer."""
        source = helper_source()
        if self.kind == "vm":
            proc = DockerHostVM().run(["python3", "-", *args], input=source, timeout=timeout)
        else:
            try:
                proc = hostproc.run([sys.executable, "-", *args], input=source,
                                    timeout=timeout, check=False)
            except hostproc.HostProcessError as exc:
                if not exc.timed_out:
                    raise
                proc = exc.result  # said below as the helper's failure, with what it wrote
        return reply_object(proc, self.where, f"run the network helper ({' '.join(args[:1])}) in")


def resolve_engine(option: str, progress: Progress) -> Engine:
    """The engine for a new lab (--engine / LABCTL_DOCKER_ENGINE, default vm), started if
    needed."""
    if option not in ENGINES:
        raise UsageError(f"unknown docker engine {option!r}",
                         hint="use `--engine vm` or `--engine local` (or LABCTL_DOCKER_ENGINE)")
    if option == "local":
        engine = Engine("local", local_base_url())
        engine.client(timeout=10).close()
        return engine
    vm = DockerHostVM()
    vm.up(progress)
    return Engine("vm", vm.base_url)
