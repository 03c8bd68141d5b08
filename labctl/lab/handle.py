"""Access to a running lab's nodes: run commands, node-side Python, device names."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from labctl.errors import LabctlError, UsageError
from labctl.lab.labdir import LabDir, find_labdir
from labctl.lab.state import NodeState
from labctl.providers import provider_for
from labctl.providers.base import Provider
from labctl.topology.resolved import Lab

NODE_PYTHONPATH = "/opt/labctl"


class LabHandle:
    def __init__(self, labdir: LabDir) -> None:
        self.labdir = labdir
        self.lab: Lab = labdir.load_lab()
        self.provider: Provider = provider_for(self.lab, labdir)

    def _check_node(self, node: str) -> None:
        names = [n.name for n in self.lab.nodes]
        if node not in names:  # bad input: exit 2, like every other unknown name
            raise UsageError(
                f"lab {self.lab.name} has no node {node!r}", hint=f"nodes: {', '.join(names)}"
            )

    def argv(self, node: str, command: list[str], *, tty: bool = False) -> list[str]:
        self._check_node(node)
        return self.provider.exec_argv(node, command, tty=tty)

    def run(
        self,
        node: str,
        command: list[str],
        *,
        timeout: float | None = None,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run `command` in `node`; never raises on a non-zero exit."""
        argv = self.argv(node, command)
        try:
            return subprocess.run(
                argv,
                input=input,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                stdin=None if input is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            return subprocess.CompletedProcess(
                argv, 124, out, err + f"\n(timed out after {timeout} s)"
            )

    def popen(self, node: str, command: list[str], **kwargs: Any) -> subprocess.Popen[str]:
        kwargs.setdefault("text", True)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen(self.argv(node, command), **kwargs)

    @staticmethod
    def node_python3(*args: str) -> list[str]:
        """python3 ARGS in a node, with labctl's node-side code importable."""
        return ["env", f"PYTHONPATH={NODE_PYTHONPATH}", "python3", *args]

    @staticmethod
    def node_python(module: str, *args: str) -> list[str]:
        return LabHandle.node_python3("-m", module, *args)

    def rdma_device(self, node: str) -> str:
        self._check_node(node)
        info = self.labdir.load_state().nodes.get(node)
        device = info.rdma_dev if info else ""
        if not device:
            raise LabctlError(f"node {node} has no RDMA device", hint="see `labctl status`")
        return device

    def node_state(self, node: str) -> NodeState | None:
        """What the lab's state recorded of `node` (device, GID index, pid...)."""
        self._check_node(node)
        return self.labdir.load_state().nodes.get(node)

    def node_status(self, node: str, timeout: float = 60) -> dict[str, Any]:
        result = self.run(node, self.node_python("labctl.nodeside.status"), timeout=timeout)
        if result.returncode != 0:
            raise LabctlError(f"cannot read status of {node}: {result.stderr.strip()}")
        status: dict[str, Any] = json.loads(result.stdout)
        return status

    def all_node_status(self, nodes: list[str]) -> dict[str, dict[str, Any] | str]:
        """Live status of several nodes at once; an error string where a node fails."""

        def one(node: str) -> dict[str, Any] | str:
            try:
                return self.node_status(node)
            except LabctlError as exc:
                return exc.message

        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            return dict(zip(nodes, pool.map(one, nodes), strict=True))


def open_lab(name: str | None) -> LabHandle:
    return LabHandle(find_labdir(name))
