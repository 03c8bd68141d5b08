"""Access to a running lab's nodes: run commands, node-side Python, device names."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from labctl import bounded, hostproc
from labctl.errors import LabctlError
from labctl.node import replies
from labctl.nodeside import NODE_CODE, STATUS_COMMAND
from labctl.providers import provider_for
from labctl.providers.base import Provider
from labctl.store.labdir import LabDir, find_labdir
from labctl.store.state import NodeState
from labctl.topology.lookup import require_node
from labctl.topology.resolved import Lab

STATUS_SECONDS = 60.0  # a node's status reply: past this it counts as not answering


class LabHandle:
    """One command's way into a running lab (one handle per command). Its lab.json is read
    once; so is its state.json (LabDir.remember_state), kept until the command itself
    writes the state, and with it the qemu nodes' ssh_config. A handle that outlives one
    command (the pytest plugin's, for a whole session) passes per_command=False: it reads
    the state again at each use, as other processes may change it meanwhile."""

    def __init__(self, labdir: LabDir, *, per_command: bool = True) -> None:
        self.labdir = labdir
        self.lab: Lab = labdir.load_lab()
        if per_command:
            labdir.remember_state()
        self.provider: Provider = provider_for(self.lab, labdir)

    def argv(self, node: str, command: list[str], *, tty: bool = False) -> list[str]:
        require_node(self.lab, node)
        return self.provider.exec_argv(node, command, tty=tty)

    def run(
        self,
        node: str,
        command: list[str],
        *,
        timeout: float | None = None,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run `command` in `node`; never raises on a non-zero exit. The node is untrusted:
        at most NODE_REPLY_BYTES of each of its stdout and stderr are kept (a note on
        stderr says when more was cut), and past `timeout` it ends with exit 124."""
        return _noted(*self._run(node, command, timeout=timeout, input=input))

    def run_in_netns(self, node: str, command: list[str], *,
                     timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        """One of labctl's own reads of `node`'s network namespace (a fixed command, never
        a user's: Provider.netns_argv), bounded like run()."""
        require_node(self.lab, node)
        return _noted(*self._run(node, command, timeout=timeout,
                                 argv=self.provider.netns_argv(node, command)))

    def _run(self, node: str, command: list[str], *, timeout: float | None,
             input: str | None = None,
             argv: list[str] | None = None) -> tuple[subprocess.CompletedProcess[str], bool]:
        argv = argv or self.argv(node, command)
        try:
            result = hostproc.run(argv, timeout=timeout, input=input, check=False)
        except hostproc.HostProcessError as exc:
            if exc.timed_out:  # a node's command past its time is one more failed command
                return exc.result, exc.result.truncated
            # the provider's client (ssh, docker) cannot be started
            raise LabctlError(f"cannot run a command in {node}: {argv[0]}: {exc.reason}",
                              hint="`labctl doctor` checks this host") from None
        return result, result.truncated

    def popen(self, node: str, command: list[str], **kwargs: Any) -> subprocess.Popen[str]:
        kwargs.setdefault("text", True)
        kwargs.setdefault("errors", "replace")  # a node may print any bytes
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen(self.argv(node, command), **kwargs)

    @staticmethod
    def node_python3(*args: str) -> list[str]:
        """python3 ARGS in a node, with labctl's node-side code importable."""
        return ["env", f"PYTHONPATH={NODE_CODE}", "python3", *args]

    @staticmethod
    def node_python(module: str, *args: str) -> list[str]:
        return LabHandle.node_python3("-m", module, *args)

    def rdma_device(self, node: str) -> str:
        require_node(self.lab, node)
        info = self.labdir.load_state().nodes.get(node)
        device = info.rdma_dev if info else ""
        if not device:
            raise LabctlError(f"node {node} has no RDMA device", hint="see `labctl status`")
        return device

    def node_state(self, node: str) -> NodeState | None:
        """What the lab's state recorded of `node` (device, GID index, pid...)."""
        require_node(self.lab, node)
        return self.labdir.load_state().nodes.get(node)

    def node_names(self) -> list[str]:
        """The lab's nodes (never none: load_lab refuses a lab.json that lists none)."""
        return [n.name for n in self.lab.nodes]

    def node_status(self, node: str, timeout: float | None = None) -> dict[str, Any]:
        """What `node` reports of its RDMA devices and interfaces (nodeside/status.sh),
        checked field by field: replies.UnreadableReply when it is not that record."""
        result, _ = self._run(node, STATUS_COMMAND, timeout=timeout or STATUS_SECONDS)
        return replies.node_status(result, node)

    def all_node_status(self, nodes: list[str]) -> dict[str, dict[str, Any] | LabctlError]:
        """Live status of several nodes at once; the error where a node fails (an
        UnreadableReply where it answered with something unusable)."""

        def one(node: str) -> dict[str, Any] | LabctlError:
            try:
                return self.node_status(node)
            except LabctlError as exc:
                return exc

        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            return dict(zip(nodes, pool.map(one, nodes), strict=True))


def _noted(result: subprocess.CompletedProcess[str],
           truncated: bool) -> subprocess.CompletedProcess[str]:
    """The result, with a note on stderr when the bound cut its output."""
    if truncated:
        result.stderr += f"\n(output cut at {bounded.NODE_REPLY_BYTES} bytes per stream)"
    return result


def open_lab(name: str | None) -> LabHandle:
    return LabHandle(find_labdir(name))

