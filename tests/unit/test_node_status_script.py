"""The node's status script (labctl/nodeside/status.sh, the shell's: no Python start per
`labctl status`) run on this host: its reply passes the host's checks, and its interfaces
are what `ip -j addr show` says of them (the node's management interface eth0 and lo
left out), in the shape the status record has."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from labctl.node.replies import node_status
from labctl.nodeside import STATUS_COMMAND

SCRIPT = Path(__file__).resolve().parents[2] / "labctl" / "nodeside" / "status.sh"
pytestmark = pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 is absent")


def _result(env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["sh", str(SCRIPT)], capture_output=True, text=True, timeout=30,
                            check=True, env={**os.environ, **(env or {})})
    assert result.stderr == ""
    return result


def _run(env: dict[str, str] | None = None) -> str:
    return _result(env).stdout


def _from_ip() -> list[dict[str, object]]:
    links = json.loads(subprocess.run(["ip", "-j", "addr", "show"], capture_output=True,
                                      text=True, timeout=30, check=True).stdout)
    return [{"name": link["ifname"], "state": link["operstate"], "mtu": link["mtu"],
             "mac": link.get("address"),
             "ipv4": [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", [])
                      if a.get("family") == "inet"]}
            for link in links if link["ifname"] not in ("lo", "eth0")]


def test_the_command_labctl_runs_is_this_script() -> None:
    assert STATUS_COMMAND == ["sh", "/opt/labctl/labctl/nodeside/status.sh"]
    assert STATUS_COMMAND[1].endswith("/" + str(SCRIPT.relative_to(SCRIPT.parents[2])))


def test_the_reply_passes_the_hosts_checks_and_says_what_ip_says() -> None:
    result = _result()
    reply = node_status(result, "node1")  # the one reader of replies, then the status checks
    assert reply["interfaces"] == _from_ip()
    assert reply["kernel"] == os.uname().release
    if not Path("/sys/class/infiniband").is_dir():
        assert reply["devices"] == []
    # one line of labctl's reply format, nothing the checks dropped or changed
    assert result.stdout.count("\n") == 1
    assert json.loads(result.stdout) == {"labctl_reply": 1, "ok": True, "data": reply}


def test_a_device_named_by_the_container_that_is_not_there_changes_nothing() -> None:
    """LABCTL_RDMA_DEV (a container node's own device) narrows the devices only when the
    device exists."""
    assert _run({"LABCTL_RDMA_DEV": "no-such-dev"}) == _run()
