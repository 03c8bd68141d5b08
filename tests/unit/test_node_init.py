"""The one node bring-up script (labctl/nodeside/node-init.sh), run for real as a Vagrant
node in a throwaway network namespace: every failing step is reported as the
"labctl: fail STEP" line and the script exits 1 (VM and container nodes stay up instead)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from labctl.providers import vagrant_plan
from labctl.topology.load import load_lab

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "labctl/nodeside/node-init.sh"
MAC = "02:aa:bb:cc:dd:01"

needs_netns = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                 reason="needs root and iproute2 (network namespaces)")


def test_every_kind_of_node_runs_the_same_script() -> None:
    container = (REPO / "labctl/nodeside/container-init.sh").read_text()
    assert "LABCTL_NODE_KIND=container exec /bin/sh /opt/labctl/labctl/nodeside/node-init.sh" \
        in container
    initramfs = (REPO / "labctl/images/initramfs-init.sh").read_text()
    assert "/opt/labctl/labctl/nodeside/node-init.sh" in initramfs  # kind vm, the default
    # Vagrant: the script labctl's plan names (test_vagrant.py checks what the node gets)
    vagrantfile = (REPO / "labctl/data/Vagrantfile").read_text()
    assert "shared = File.read(node_init)" in vagrantfile
    assert "LABCTL_NODE_KIND=vagrant" in vagrantfile
    lab = load_lab(REPO / "topologies" / "two-node.yaml")
    assert vagrant_plan.plan(lab, None, {"HOME": "/nonexistent"})["node_init"] == str(SCRIPT)


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"rdmalab-ni{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "add", "nic0", "address", MAC, "type", "veth",
                        "peer", "name", "peer0"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _run(netns: str, tmp_path: Path, ifaces: str, rdma: str = "none",
         extra: str = "") -> subprocess.CompletedProcess[str]:
    env_file = tmp_path / "node.env"
    env_file.write_text(f"LABCTL_LAB=ut\nLABCTL_NODE=n1\nLABCTL_RDMA={rdma}\n"
                        f"LABCTL_RDMA_DEV={rdma}0\nLABCTL_RDMA_NETDEV=eth1\n"
                        f"LABCTL_MGMT_MAC=02:00:00:00:00:09\nLABCTL_IFACES='{ifaces}'\n{extra}")
    script = tmp_path / "node-init.sh"
    script.write_text(SCRIPT.read_text().replace("/etc/labctl/node.env", str(env_file))
                      .replace("udevadm settle --timeout=30", "true")
                      .replace("modprobe -a $modules", "true")
                      .replace("*) ticks=300", "*) ticks=10"))
    return subprocess.run(["ip", "netns", "exec", netns, "sh", str(script), "start"],
                          capture_output=True, text=True, check=False, timeout=60,
                          env={**os.environ, "LABCTL_NODE_KIND": "vagrant"})


@needs_netns
def test_names_addresses_and_reports_ready(netns: str, tmp_path: Path) -> None:
    result = _run(netns, tmp_path, f"eth1,{MAC},192.0.2.1/24,1400")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "labctl: ready dev=none0"
    show = subprocess.run(["ip", "-n", netns, "-br", "addr", "show", "eth1"],
                          capture_output=True, text=True, check=True).stdout
    assert "192.0.2.1/24" in show


@needs_netns
def test_a_failing_ip_step_is_reported_not_ignored(netns: str, tmp_path: Path) -> None:
    result = _run(netns, tmp_path, f"eth1,{MAC},192.0.2.1/99,1400")
    assert result.returncode == 1
    # ip exits at once on a malformed prefix: every command is shown, then its error
    assert "labctl: network: ip addr add 192.0.2.1/99 dev eth1" in result.stdout
    assert 'labctl: fail Error: inet prefix is expected rather than "192.0.2.1/99"' \
        in result.stdout, result.stdout
    assert "labctl: ready" not in result.stdout


@needs_netns
def test_a_failing_ip_command_is_named(netns: str, tmp_path: Path) -> None:
    """An error ip reports per line (an MTU the veth refuses) names that line."""
    result = _run(netns, tmp_path, f"eth1,{MAC},192.0.2.1/24,70000")
    assert result.returncode == 1
    assert "labctl: fail ip link set eth1 mtu 70000: Error: " in result.stdout, result.stdout
    assert "labctl: network: ip" not in result.stdout
    assert "labctl: ready" not in result.stdout


@needs_netns
def test_a_missing_nic_is_reported(netns: str, tmp_path: Path) -> None:
    result = _run(netns, tmp_path, "eth1,02:aa:bb:cc:dd:77,192.0.2.1/24,1400")
    assert result.returncode == 1
    assert "labctl: fail NIC eth1 (02:aa:bb:cc:dd:77) not found" in result.stdout


@needs_netns
def test_an_unchecked_failure_still_ends_in_a_fail_line(netns: str, tmp_path: Path) -> None:
    """set -eu: an unset variable (or any unchecked command) is a fail line with the step."""
    env_extra = "unset LABCTL_IFACES\n"
    result = _run(netns, tmp_path, f"eth1,{MAC},192.0.2.1/24,1400", extra=env_extra)
    assert result.returncode != 0
    assert "labctl: fail step network" in result.stdout, result.stdout + result.stderr


@needs_netns
def test_a_router_forwards_and_a_node_gets_its_routes(netns: str, tmp_path: Path) -> None:
    extra = ("LABCTL_ROUTER=1\n"
             "LABCTL_ROUTES='198.51.100.0/24,192.0.2.254 203.0.113.0/24,192.0.2.7'\n")
    result = _run(netns, tmp_path, f"eth1,{MAC},192.0.2.1/24,1400", extra=extra)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "labctl: stage forwarding" in result.stdout
    assert "labctl: stage routes" in result.stdout
    forward = subprocess.run(["ip", "netns", "exec", netns, "cat",
                              "/proc/sys/net/ipv4/ip_forward"],
                             capture_output=True, text=True, check=True).stdout
    assert forward.strip() == "1"
    routes = subprocess.run(["ip", "-n", netns, "-4", "route", "show"],
                            capture_output=True, text=True, check=True).stdout
    assert "198.51.100.0/24 via 192.0.2.254 dev eth1" in routes
    assert "203.0.113.0/24 via 192.0.2.7 dev eth1" in routes


@needs_netns
def test_a_route_the_kernel_refuses_is_reported(netns: str, tmp_path: Path) -> None:
    extra = "LABCTL_ROUTES='198.51.100.0/24,203.0.113.9'\n"  # gateway on no segment
    result = _run(netns, tmp_path, f"eth1,{MAC},192.0.2.1/24,1400", extra=extra)
    assert result.returncode == 1
    assert "labctl: fail ip route add 198.51.100.0/24 via 203.0.113.9" in result.stdout
    assert "labctl: ready" not in result.stdout


@needs_netns
def test_a_plain_node_does_not_forward(netns: str, tmp_path: Path) -> None:
    result = _run(netns, tmp_path, f"eth1,{MAC},192.0.2.1/24,1400")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "stage forwarding" not in result.stdout and "stage routes" not in result.stdout
    forward = subprocess.run(["ip", "netns", "exec", netns, "cat",
                              "/proc/sys/net/ipv4/ip_forward"],
                             capture_output=True, text=True, check=True).stdout
    assert forward.strip() == "0"
