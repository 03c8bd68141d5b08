"""Count what a lab leaves on the host: used before and after teardown."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

from pyroute2 import netns

from labctl.paths import state_root


def lab_qemus(name: str) -> list[str]:
    """qemu processes of lab `name`, exactly: their -pidfile lies in the lab's directory
    (a substring of -name would also match lab `name-x`)."""
    nodes = f"{state_root() / name}/nodes/"
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        for flag, value in itertools.pairwise(argv):
            if flag == "-pidfile" and value.startswith(nodes) and value.count("/") == (
                    nodes.count("/") + 1):
                found.append(f"{proc.name} {' '.join(argv[:3])}")
    return sorted(found)


def lab_leftovers(name: str) -> dict[str, list[str]]:
    """Everything of lab `name` still on the host (empty lists when it is gone)."""
    procs = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True,
                           text=True).stdout  # -ww: whole command lines, never cut
    labdir = state_root() / name
    return {
        "netns": [n for n in netns.listnetns() if n == f"labctl-{name}"],
        "qemu": lab_qemus(name),
        "ssh": [p.strip() for p in procs.splitlines() if "ssh" in p and f"{labdir}/" in p],
        "labdir": [str(labdir)] if labdir.exists() else [],
    }


def host_interfaces() -> set[str]:
    return {p.name for p in Path("/sys/class/net").iterdir()}


def docker_leftovers(name: str, vms: tuple[str, ...] = ("default",)) -> dict[str, list[str]]:
    """Everything of docker lab `name` still in the engines of the Docker host VMs `vms`:
    containers, networks labctl made, swarm membership, and in each VM's kernel the lab's
    netns, rxe links and veths left in the root namespace (a lab's veths live in its netns
    and containers: one in the root namespace is a leak)."""
    from labctl.dockerhost.engine import helper_source, reply_object
    from labctl.dockerhost.sdk import sdk
    from labctl.dockerhost.vm import DockerHostVM

    found: dict[str, list[str]] = {}
    for vm in vms:
        where = "" if vm == "default" else f" in {vm}"
        host = DockerHostVM(vm)
        client = sdk().DockerClient(base_url=host.base_url, timeout=60)
        try:
            found[f"containers{where}"] = [c.name for c in client.containers.list(
                all=True, filters={"label": f"labctl.lab={name}"})]
            # the lab's own, and the swarm's that leaving it removes
            found[f"networks{where}"] = sorted(
                n.name for n in client.networks.list() if n.name in {"docker_gwbridge", "ingress"}
                or (n.attrs.get("Labels") or {}).get("labctl.lab") == name)
            swarm = client.info()["Swarm"]["LocalNodeState"]
            found[f"swarm{where}"] = [] if swarm == "inactive" else [swarm]
        finally:
            client.close()
        shown = host.run(["python3", "-", "show", f"labctl-{name}"], input=helper_source(),
                         timeout=120)
        kernel = reply_object(shown, host.title, "list what the lab left in")
        found[f"engine netns{where}"] = [n for n in kernel["netns"] if n == f"labctl-{name}"]
        found[f"rxe links{where}"] = [d for d in kernel["rdma_links"] if f"_{name}_" in d]
        found[f"root veths{where}"] = kernel["root_veths"]
    return found
