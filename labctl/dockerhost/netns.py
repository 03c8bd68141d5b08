"""labctl's own reads of a container node's network namespace, run by the kernel's host.

A `docker exec` costs about 2 s under TCG (containerd's shim and runc, two Go programs
started in the Docker host VM's one vCPU), and a run reads each node's counters twice and
polls for its server's listening socket: 8-10 s of a 16 s pingpong on a docker lab
(docs/performance.md). The Docker host VM's ssh master runs the same read in a few tenths
of a second with `nsenter --net`: the VM's own `rdma`, `ss` and `ip` in the node's network
namespace, where its sockets, CM ids and /proc/net are. (The VM runs RDMA in shared netns
mode: `rdma statistic` lists every rxe device of its kernel there, as it does inside the
container.)

Only fixed commands of labctl go this way (counters, readiness probes), never a user's:
they run as root in the VM, outside the container's cgroup, capabilities and seccomp, and
with the VM's files, not the container's (no mount namespace is entered: a node's user
could otherwise put a program of their own where labctl runs one as the VM's root).

The container's pid comes from its engine; the host checks that the process is still that
container's (its id in /proc/PID/cgroup) before entering: a pid reused after a restart
must not lend labctl another namespace. Where labctl cannot reach the engine's host (a
remote engine, no nsenter), the caller runs the read with `docker exec`.
"""

from __future__ import annotations

import re
import shutil
import threading
from typing import Any

from labctl.dockerhost.sdk import sdk
from labctl.dockerhost.vm import DockerHostVM, vm_for_socket

# Exit status of the host side when the pid is no longer the container's (no nsenter ran).
GONE = 125
_CONTAINER_ID = re.compile(r"[0-9a-f]{64}")
_MAX_PID = 2**22  # the kernel's PID_MAX_LIMIT
# $1 pid, $2 container id, then the command: arguments, never part of the script's text.
_ENTER = ('grep -qF -- "$2" "/proc/$1/cgroup" 2>/dev/null || '
          '{ echo "labctl: process $1 is no longer container $2" >&2; '
          f'exit {GONE}; }}; '
          'pid=$1; shift 2; exec nsenter --target "$pid" --net -- "$@"')


class Targets:
    """Finds the running containers of one lab, one engine client per engine: a client's
    first request negotiates the API version, about 0.5 s in the Docker host VM under TCG,
    and a run asks before and after it and while it waits for its server."""

    def __init__(self, lab: str) -> None:
        self.lab = lab
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _client(self, base_url: str) -> Any:
        with self._lock:  # the counters of a run's nodes are read in parallel threads
            if base_url not in self._clients:
                self._clients[base_url] = sdk().DockerClient(base_url=base_url, timeout=30)
            return self._clients[base_url]

    def find(self, base_url: str, name: str) -> tuple[int, str] | None:
        """The running container `name` of the lab: its pid and id as its engine reports
        them, checked for shape (None when it is not running, not the lab's, or the
        engine does not answer)."""
        try:
            attrs = self._client(base_url).api.inspect_container(name)
        except Exception:  # the SDK raises many kinds
            return None
        return checked_target(attrs, self.lab)

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()


def checked_target(attrs: Any, lab: str) -> tuple[int, str] | None:
    """(pid, id) from an engine's inspect of a container of `lab`, if it runs and every
    field has its shape."""
    if not isinstance(attrs, dict):
        return None
    config, state = attrs.get("Config"), attrs.get("State")
    labels = config.get("Labels") if isinstance(config, dict) else None
    if not isinstance(labels, dict) or not isinstance(state, dict):
        return None
    pid, cid = state.get("Pid"), attrs.get("Id")
    if (labels.get("labctl.lab") != lab or state.get("Running") is not True
            or isinstance(pid, bool) or not isinstance(pid, int) or not 1 < pid < _MAX_PID
            or not isinstance(cid, str) or not _CONTAINER_ID.fullmatch(cid)):
        return None
    return pid, cid


def netns_argv(base_url: str, pid: int, container_id: str,
               command: list[str]) -> list[str] | None:
    """The host argv that runs `command` in the network namespace of process `pid` of the
    engine's host, if that process is still the container's: over the Docker host VM's ssh
    master, or here for an engine on a local socket; None when labctl cannot reach the
    engine's host (a remote engine) or this host has no nsenter."""
    enter = ["sh", "-c", _ENTER, "sh", str(pid), container_id, *command]
    vm = vm_for_socket(base_url)
    if vm is not None:
        return DockerHostVM(vm).ssh_argv(enter)
    if (base_url.startswith("unix://") and shutil.which("nsenter") is not None
            and _is_local_container(pid, container_id)):
        return enter  # an engine of this host's kernel (a local socket may lead elsewhere)
    return None


def _is_local_container(pid: int, container_id: str) -> bool:
    """Process `pid` of this host is in the container's cgroup."""
    try:
        with open(f"/proc/{pid}/cgroup", "rb") as handle:
            return container_id.encode() in handle.read(65536)
    except OSError:
        return False
