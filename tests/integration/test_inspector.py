"""The Python inspector against rdma-core's C tools, on live lab nodes.

Each case runs `ibv_<tool> ARGS` and `python3 -m labctl.verbs <tool> ARGS` on the same node
and requires the same stdout (byte for byte) and exit code; a mismatch shows a unified diff.
"""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.integration.hotplug import HELPER_ONLY, HELPER_SOCKET, check_hot_plug

if TYPE_CHECKING:
    from labctl.lab.handle import LabHandle

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

CASES = [
    ("devinfo", []),
    ("devinfo", ["-v"]),
    ("devinfo", ["-d", "{dev}"]),
    ("devinfo", ["-d", "nosuchdev0"]),
    ("devinfo", ["-i", "1"]),
    ("devinfo", ["-i", "2"]),
    ("devinfo", ["-i", "0"]),
    ("devinfo", ["--ib-port=257"]),
    ("devinfo", ["-l"]),
    ("devinfo", ["-v", "--ib-dev={dev}", "-i", "1"]),
    ("devinfo", ["-x"]),
    ("devinfo", ["-l", "-x"]),
    ("devices", []),
    ("asyncwatch", ["-h"]),
    ("asyncwatch", ["-d", "nosuchdev0"]),
]


def _rdma_nodes(handle: LabHandle) -> list[str]:
    return [n.name for n in handle.lab.nodes if n.rdma != "none"]


def _diff(c_out: str, py_out: str) -> str:
    return "".join(
        difflib.unified_diff(
            c_out.splitlines(True), py_out.splitlines(True), "C tool", "labctl.verbs"
        )
    )


def compare(handle: LabHandle, node: str, tool: str, args: list[str]) -> None:
    c = handle.run(node, [f"ibv_{tool}", *args], timeout=120)
    py = handle.run(node, handle.node_python("labctl.verbs", tool, *args), timeout=120)
    assert py.stdout == c.stdout, (
        f"stdout differs on {node} for {tool} {args}:\n{_diff(c.stdout, py.stdout)}"
        f"\nours stderr: {py.stderr}"
    )
    assert py.returncode == c.returncode, (
        f"exit code differs on {node} for {tool} {args}: C {c.returncode}, ours "
        f"{py.returncode}\nours stderr: {py.stderr}"
    )


@pytest.mark.parametrize(("tool", "args"), CASES, ids=[" ".join([t, *a]) for t, a in CASES])
def test_same_as_c(lab_handle: LabHandle, tool: str, args: list[str]) -> None:
    nodes = _rdma_nodes(lab_handle)
    if not nodes:
        pytest.skip("the lab has no node with an RDMA device")
    node = nodes[0]
    dev = lab_handle.rdma_device(node)
    compare(lab_handle, node, tool, [a.format(dev=dev) for a in args])


def test_every_node_devinfo_v(lab_handle: LabHandle) -> None:
    assert _rdma_nodes(lab_handle) == ["node1", "node2"]
    for node in _rdma_nodes(lab_handle):
        compare(lab_handle, node, "devinfo", ["-v"])


NO_DEVICE_CASES = [
    ("devinfo", []),
    ("devinfo", ["-v"]),
    ("devinfo", ["-l"]),
    ("devinfo", ["-d", "rxe0"]),
    ("devices", []),
    ("asyncwatch", []),
]


def test_node_without_rdma(lab_handle: LabHandle) -> None:
    """On a node with no device: a `rdma: none` node, else one whose device we remove."""
    bare = [n.name for n in lab_handle.lab.nodes if n.rdma == "none"]
    if bare:
        for tool, args in NO_DEVICE_CASES:
            compare(lab_handle, bare[0], tool, args)
        return
    node = lab_handle.lab.node(_rdma_nodes(lab_handle)[-1])
    if node.rdma != "rxe" or node.rdma_interface is None:
        pytest.skip("no `rdma: none` node, and only rxe devices are removed and re-made here")
    dev = lab_handle.rdma_device(node.name)
    gone = lab_handle.run(node.name, ["rdma", "link", "delete", dev], timeout=60)
    assert gone.returncode == 0, gone.stderr
    try:
        for tool, args in NO_DEVICE_CASES:
            compare(lab_handle, node.name, tool, args)
    finally:
        back = lab_handle.run(
            node.name,
            ["rdma", "link", "add", dev, "type", "rxe", "netdev", node.rdma_interface.name],
            timeout=60,
        )
        assert back.returncode == 0, back.stderr
        _wait_active(lab_handle, node.name, dev)


def test_host_cli_passes_node_output_through(lab_handle: LabHandle) -> None:
    node = _rdma_nodes(lab_handle)[0]
    c = lab_handle.run(node, ["ibv_devinfo", "-v"], timeout=120)
    host = subprocess.run(
        [sys.executable, "-m", "labctl", "devinfo", node, "-v", "--lab", lab_handle.lab.name],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
    )
    assert host.stdout == c.stdout, f"{_diff(c.stdout, host.stdout)}\nstderr: {host.stderr}"
    assert host.returncode == c.returncode, host.stderr


def _wait_helper(handle: LabHandle, node: str, timeout: float = 180) -> None:
    """The node's helper listens once it has imported pyverbs (at the lowest priority)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if handle.run(node, ["test", "-S", HELPER_SOCKET], timeout=30).returncode == 0:
            return
        time.sleep(0.5)
    log = handle.run(node, ["cat", "/run/labctl-verbs-helper.log"], timeout=30).stdout
    raise AssertionError(f"no inspector helper in {node} after {timeout} s: {log}")


def _direct_argv(*args: str) -> list[str]:
    """labctl's call with the helper switched off: the process imports pyverbs itself."""
    from labctl.cli.inspect import node_argv
    from labctl.verbs.helper import DIRECT_ENV

    return ["env", f"{DIRECT_ENV}=1", *node_argv(*args)]


@pytest.mark.parametrize("args", [["-v"], ["-d", "nosuchdev0"], ["-x"], ["-l"]],
                         ids=lambda a: " ".join(a))
def test_helper_and_direct_paths_are_the_c_tools_bytes(
    lab_handle: LabHandle, args: list[str]
) -> None:
    from labctl.cli.inspect import node_argv

    node = _rdma_nodes(lab_handle)[0]
    _wait_helper(lab_handle, node)
    c = lab_handle.run(node, ["ibv_devinfo", *args], timeout=120)
    paths = {
        "helper": lab_handle.node_python3("-S", "-c", HELPER_ONLY, "devinfo", *args),
        "labctl's call": node_argv("devinfo", *args),
        "direct": _direct_argv("devinfo", *args),
        "python wrapper": ["/usr/local/lib/labctl/labctl-devinfo", *args],
    }
    differ = []
    for name, argv in paths.items():
        ours = lab_handle.run(node, argv, timeout=120)
        if (ours.returncode, ours.stdout) != (c.returncode, c.stdout):
            differ.append(
                f"{name} path differs for devinfo {args}:\n{_diff(c.stdout, ours.stdout)}"
                f"\nexit {ours.returncode} (C {c.returncode}); stderr: {ours.stderr}")
    assert not differ, "\n".join(differ)


def test_the_node_commands_are_the_compiled_client(lab_handle: LabHandle) -> None:
    """In a qemu node (and a container: the same root filesystem), labctl-devinfo and
    labctl-devices (what labctl's own calls run) are the image's compiled client of the
    helper; with the helper told off they still answer, through the Python wrapper they
    fall back to."""
    node = _rdma_nodes(lab_handle)[0]
    _wait_helper(lab_handle, node)
    for tool in ("devinfo", "devices"):
        path = lab_handle.run(node, ["readlink", "-f", f"/usr/local/bin/labctl-{tool}"],
                              timeout=30)
        assert path.stdout.strip() == "/usr/local/lib/labctl/labctl-verbs-client", path
    c = lab_handle.run(node, ["ibv_devices"], timeout=60)
    for argv in (["labctl-devices"], ["env", "LABCTL_VERBS_DIRECT=1", "labctl-devices"]):
        ours = lab_handle.run(node, argv, timeout=120)
        assert (ours.returncode, ours.stdout) == (c.returncode, c.stdout), (argv, ours.stderr)


def test_devices_made_and_removed_under_a_running_helper(lab_handle: LabHandle) -> None:
    check_hot_plug(lab_handle, _rdma_nodes(lab_handle)[0], "rxe")


def test_timing(lab_handle: LabHandle) -> None:
    """Wall time of C `ibv_devinfo -v` and ours in the same node (reported, loosely bounded):
    through the node's helper, and direct (pyverbs imported by the process itself)."""
    from labctl.cli.inspect import node_argv

    node = _rdma_nodes(lab_handle)[0]
    _wait_helper(lab_handle, node)
    argvs = {
        "c": ["ibv_devinfo", "-v"],
        "helper": node_argv("devinfo", "-v"),
        "direct": _direct_argv("devinfo", "-v"),
    }
    script = (
        "import json, subprocess, sys, time\n"
        "argvs, xs = json.loads(sys.argv[1]), {}\n"
        "for _ in range(3):\n"
        "    for k, argv in argvs.items():\n"
        "        s = time.perf_counter()\n"
        "        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "        xs[k] = min(xs.get(k, 1e9), time.perf_counter() - s)\n"
        "print(json.dumps(xs))\n"
    )
    proc = lab_handle.run(node, ["python3", "-c", script, json.dumps(argvs)], timeout=300)
    assert proc.returncode == 0, proc.stderr
    times = json.loads(proc.stdout)
    print(f"\ndevinfo -v on {node} (min of 3): C {times['c'] * 1000:.0f} ms, ours through the "
          f"helper {times['helper'] * 1000:.0f} ms, direct {times['direct'] * 1000:.0f} ms")
    assert times["helper"] < 30 and times["direct"] < 60


# ------------------------------------------------------------------------ asyncwatch
class Watcher:
    """A watcher process in a node; every stdout line is kept in `lines`."""

    def __init__(self, handle: LabHandle, node: str, argv: list[str]) -> None:
        self.handle = handle
        self.node = node
        wrapped = ["sh", "-c", 'echo "pid $$"; exec "$@"', "sh", *argv]
        self.proc = handle.popen(node, wrapped, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: list[str] = []
        self.pid = ""
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("pid ") and not self.pid:
                self.pid = line.split()[1]
                continue
            with self._lock:
                self.lines.append(line)

    def wait_for(self, text: str, timeout: float, after: int = 0) -> int:
        """Wait until a line (index >= after) contains text; return that line's index."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                for i in range(after, len(self.lines)):
                    if text in self.lines[i]:
                        return i
            time.sleep(0.1)
        raise AssertionError(f"{text!r} not seen in {timeout} s on {self.node}: {self.lines}")

    def stop(self) -> None:
        if self.pid:
            self.handle.run(self.node, ["kill", "-INT", self.pid], timeout=30)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _wait_active(handle: LabHandle, node: str, dev: str, timeout: float = 60) -> None:
    path = f"/sys/class/infiniband/{dev}/ports/1/state"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "ACTIVE" in handle.run(node, ["cat", path], timeout=30).stdout:
            return
        time.sleep(0.5)
    raise AssertionError(f"{dev} on {node} not ACTIVE again after {timeout} s")


@pytest.mark.parametrize("how", ["labctl-link", "in-node"])
def test_asyncwatch_same_events(lab_handle: LabHandle, how: str) -> None:
    node = _rdma_nodes(lab_handle)[0]
    dev = lab_handle.rdma_device(node)
    ifname = lab_handle.lab.node(node).rdma_interface.name  # type: ignore[union-attr]
    if how == "labctl-link":

        def toggle(state: str) -> None:
            proc = subprocess.run(
                [sys.executable, "-m", "labctl", "link", "set", f"{node}:{ifname}", state,
                 "--lab", lab_handle.lab.name],
                capture_output=True, text=True, cwd=REPO, timeout=120,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
    else:

        def toggle(state: str) -> None:
            proc = lab_handle.run(node, ["ip", "link", "set", ifname, state], timeout=60)
            assert proc.returncode == 0, proc.stderr

    c = Watcher(lab_handle, node, ["ibv_asyncwatch", "-d", dev])
    ours = Watcher(
        lab_handle, node, lab_handle.node_python("labctl.verbs", "asyncwatch", "-d", dev)
    )
    toggled = False
    try:
        c.wait_for("async event FD", 60)
        ours.wait_for("async event FD", 60)
        toggled = True
        toggle("down")
        i = c.wait_for("IBV_EVENT_PORT_ERR", 60)
        j = ours.wait_for("IBV_EVENT_PORT_ERR", 60)
        toggle("up")
        c.wait_for("IBV_EVENT_PORT_ACTIVE", 60, after=i)
        ours.wait_for("IBV_EVENT_PORT_ACTIVE", 60, after=j)
        time.sleep(5)  # late events (GID changes) reach both
    finally:
        if toggled:
            toggle("up")
            _wait_active(lab_handle, node, dev)
        c.stop()
        ours.stop()
    c_text, our_text = "".join(c.lines), "".join(ours.lines)
    assert our_text == c_text, f"event lines differ:\n{_diff(c_text, our_text)}"
    assert ours.proc.returncode == 0, "ours must exit 0 on SIGINT"
