"""The docker provider's plan: what containers and links `create` asks the engine for.

No engine here: a faked Docker SDK stands in only where the plan meets it (the create
call's keyword arguments must be ones the real SDK accepts).
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from labctl.providers.docker import (
    DockerLabPlan,
    container_name,
    import_changes,
    node_payload,
    plan_lab,
)
from labctl.topology.load import load_lab
from labctl.topology.resolved import Lab

REPO = Path(__file__).resolve().parents[2]
TAG = "labctl-node:trixie-0123456789abcdef-deadbeef"
OWNER = "labctl-owner:0123456789abcdef0123456789abcdef"


@pytest.fixture
def lab() -> Lab:
    return load_lab(REPO / "topologies/docker-two-node.yaml")


@pytest.fixture
def plan(lab: Lab) -> DockerLabPlan:
    return plan_lab(lab, {"trixie": TAG}, "10:260", OWNER)


def test_topology_selects_the_docker_provider(lab: Lab) -> None:
    assert lab.provider == "docker"
    assert [n.name for n in lab.nodes] == ["node1", "node2"]


def test_containers_get_only_what_rdma_needs(plan: DockerLabPlan) -> None:
    assert len(plan.containers) == 2
    for cplan in plan.containers:
        kwargs = cplan.create
        assert kwargs["image"] == TAG
        assert kwargs["network_mode"] == "none"
        assert kwargs["cap_add"] == ["NET_ADMIN"]
        assert "privileged" not in kwargs and "cap_drop" not in kwargs
        assert kwargs["ulimits"] == [{"Name": "memlock", "Soft": -1, "Hard": -1}]
        # uverbs (major 231) and exactly the RDMA CM misc device the engine's kernel has
        assert kwargs["device_cgroup_rules"] == ["c 231:* rwm", "c 10:260 rwm"]
        assert kwargs["volumes"] == {
            "/dev/infiniband": {"bind": "/dev/infiniband", "mode": "rw"}
        }
        assert kwargs["mem_limit"] == "512m"


def test_without_rdma_cm_no_misc_rule(lab: Lab) -> None:
    plan = plan_lab(lab, {"trixie": TAG}, "", OWNER)
    assert plan.containers[0].create["device_cgroup_rules"] == ["c 231:* rwm"]


def test_labels_alone_identify_lab_node_and_device(plan: DockerLabPlan) -> None:
    labels = [c.create["labels"] for c in plan.containers]
    assert labels == [
        {"labctl": "1", "labctl.lab": "docker-two-node", "labctl.owner": OWNER,
         "labctl.node": "node1", "labctl.rdma-dev": "rxe_docker-two-node_node1"},
        {"labctl": "1", "labctl.lab": "docker-two-node", "labctl.owner": OWNER,
         "labctl.node": "node2", "labctl.rdma-dev": "rxe_docker-two-node_node2"},
    ]
    assert [c.create["name"] for c in plan.containers] == [
        container_name("docker-two-node", "node1"), container_name("docker-two-node", "node2")]


def test_each_node_knows_its_own_unique_device(plan: DockerLabPlan) -> None:
    envs = [c.create["environment"] for c in plan.containers]
    devices = [e["LABCTL_RDMA_DEV"] for e in envs]
    assert len(set(devices)) == 2  # shared netns mode: the kernel sees both
    assert envs[0]["LABCTL_RDMA_NETDEV"] == "eth1"
    iface = envs[1]["LABCTL_IFACES"].split(",")
    assert iface[0] == "eth1" and iface[2:] == ["10.77.1.2/24", "1500"]
    assert "LABCTL_MGMT_MAC" not in envs[0]


def test_links_are_veths_on_a_bridge_in_the_lab_netns(plan: DockerLabPlan, lab: Lab) -> None:
    assert plan.netns == "labctl-docker-two-node"
    assert plan.bridges == [("br0", 1500)]
    assert plan.veths == [
        {"host": "v1-eth1", "bridge": "br0", "node": "node1", "name": "eth1",
         "mac": lab.node("node1").interfaces[0].mac, "mtu": 1500},
        {"host": "v2-eth1", "bridge": "br0", "node": "node2", "name": "eth1",
         "mac": lab.node("node2").interfaces[0].mac, "mtu": 1500},
    ]


def test_payload_carries_node_code_and_settings(plan: DockerLabPlan) -> None:
    data = node_payload(plan.containers[1].create["environment"])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = tar.getnames()
        env_file = tar.extractfile("etc/labctl/node.env")
        assert env_file is not None
        env = env_file.read().decode()
        init = tar.getmember("opt/labctl/labctl/nodeside/container-init.sh")
    assert "LABCTL_RDMA_DEV=rxe_docker-two-node_node2\n" in env
    assert init.mode == 0o755
    assert "opt/labctl/labctl/verbs/devinfo.py" in names
    assert not any("__pycache__" in n for n in names)


def test_import_recipe_starts_the_container_init() -> None:
    changes = import_changes()
    cmd = [c for c in changes if c.startswith("CMD ")]
    assert cmd and "container-init.sh" in cmd[0] and "tini" in cmd[0]


class FakeContainers:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    def create(self, image: str, command: Any = None, **kwargs: Any) -> None:
        self.created.append({"image": image, **kwargs})


def test_plan_is_accepted_by_the_sdk_host_config(plan: DockerLabPlan) -> None:
    """The real SDK turns the keyword arguments into an API request without complaint."""
    containers = pytest.importorskip("docker.models.containers")
    args = containers._create_container_args({**plan.containers[0].create, "version": "1.45"})
    host_config = args["host_config"]
    assert host_config["NetworkMode"] == "none"
    assert host_config["CapAdd"] == ["NET_ADMIN"]
    assert host_config["DeviceCgroupRules"] == ["c 231:* rwm", "c 10:260 rwm"]
    assert host_config["Ulimits"] == [{"Name": "memlock", "Soft": -1, "Hard": -1}]
    assert host_config["Binds"] == ["/dev/infiniband:/dev/infiniband:rw"]
    assert "Privileged" not in host_config or host_config["Privileged"] is False
    fake = FakeContainers()
    fake.create(**plan.containers[0].create)
    assert fake.created[0]["labels"]["labctl.lab"] == "docker-two-node"


def test_a_router_container_forwards_and_nodes_get_their_routes() -> None:
    """A container's /proc/sys is read-only: forwarding is set at creation (sysctls), the
    routes come with the node's settings like every other node-init step."""
    routed = load_lab(REPO / "topologies/routed.yaml")
    plan = plan_lab(routed, {"trixie": TAG}, "", OWNER)
    create = {c.node: c.create for c in plan.containers}
    assert create["router"]["sysctls"] == {"net.ipv4.ip_forward": "1"}
    assert "sysctls" not in create["node1"] and "sysctls" not in create["node2"]
    assert create["router"]["environment"]["LABCTL_ROUTER"] == "1"
    assert create["node1"]["environment"]["LABCTL_ROUTES"] == "10.77.2.0/24,10.77.1.1"
    assert "privileged" not in create["router"]
    containers = pytest.importorskip("docker.models.containers")
    args = containers._create_container_args({**create["router"], "version": "1.45"})
    assert args["host_config"]["Sysctls"] == {"net.ipv4.ip_forward": "1"}
