"""Network plumbing for container nodes, run as root on the machine whose kernel runs them.

That machine is the Docker host VM (labctl pipes this file to `python3 -` over ssh) or,
with a local engine, the host itself. Standard library plus `ip`/`rdma` only, so it runs
anywhere the node image's tools are. Usage (every answer is one line of labctl's reply
format on stdout, labctl/nodeside/reply.py):

  dockernet.py facts               kernel, RDMA CM device number, netns mode, modules
  dockernet.py plumb PLAN_JSON     lab netns, a bridge per segment, a veth per interface
                                   whose peer is created inside the container's netns
  dockernet.py replug PLAN_JSON    new veths for restarted containers (lab netns exists)
  dockernet.py link NETNS VETH up|down
                                   carrier of a node's interface: its veth's bridge end
  dockernet.py teardown NETNS [OWNER]
                                   delete the lab netns (its bridges and veth ends go too),
                                   unless its loopback's alias names another owner
  dockernet.py show NETNS          what exists: lab netns, their links, rdma links, veths
  dockernet.py probe               per-netns rxe functional probe (two netns, veth, one rxe
                                   each, a short RC pingpong), removing all it made
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

# labctl.net.labnet's mark (this file stays stdlib-only: it is copied, not imported)
OWNER_PREFIX = "labctl-owner:"


def run(*argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {(proc.stderr or proc.stdout).strip()}")
    return proc


def netns_list() -> list[str]:
    out = run("ip", "-j", "netns", "list", check=False).stdout
    return sorted(n["name"] for n in json.loads(out or "[]"))


def rdma_links() -> list[dict[str, object]]:
    out = run("rdma", "-j", "link", "show", check=False).stdout
    return list(json.loads(out or "[]"))


def read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def facts() -> dict[str, object]:
    mode = run("rdma", "system", "show", check=False).stdout
    return {
        "kernel": os.uname().release,
        "rdma_cm": read("/sys/class/misc/rdma_cm/dev"),  # "10:MINOR" (a dynamic misc minor)
        "netns_mode": "shared" if "netns shared" in mode else mode.strip() or "unknown",
        "rdma_rxe": os.path.isdir("/sys/module/rdma_rxe"),
        "siw": os.path.isdir("/sys/module/siw"),
        "infiniband_dev": sorted(os.listdir("/dev/infiniband"))
        if os.path.isdir("/dev/infiniband")
        else [],
    }


def plumb(plan: dict[str, object]) -> dict[str, object]:
    ns = str(plan["netns"])
    if ns in netns_list():
        raise RuntimeError(f"network namespace {ns} already exists (a lab of this name is up?)")
    run("ip", "netns", "add", ns)
    run("ip", "-n", ns, "link", "set", "lo", "up")
    if plan.get("owner"):  # whose it is: two state dirs may each have a lab of this name
        run("ip", "-n", ns, "link", "set", "lo", "alias", str(plan["owner"]))
    for bridge, mtu in plan["bridges"]:  # type: ignore[attr-defined]
        # no STP, no forwarding delay, no multicast snooping (as the qemu provider's bridges)
        run("ip", "-n", ns, "link", "add", bridge, "type", "bridge", "stp_state", "0",
            "forward_delay", "0", "mcast_snooping", "0")
        run("ip", "-n", ns, "link", "set", bridge, "mtu", str(mtu), "up")
    made = []
    for veth in plan["veths"]:  # type: ignore[attr-defined]
        add_veth(ns, veth)
        made.append(veth["host"])
    return {"netns": ns, "veths": made}


def add_veth(ns: str, veth: dict[str, object]) -> None:
    mtu = str(veth["mtu"])
    # The peer is born inside the container's netns with its final name and MAC.
    run("ip", "-n", ns, "link", "add", str(veth["host"]), "mtu", mtu, "type", "veth", "peer",
        "name", str(veth["name"]), "address", str(veth["mac"]), "mtu", mtu, "netns",
        str(veth["pid"]))
    run("ip", "-n", ns, "link", "set", str(veth["host"]), "master", str(veth["bridge"]), "up")


def replug(plan: dict[str, object]) -> dict[str, object]:
    """Veths for containers that started again (their old netns and veths died)."""
    ns = str(plan["netns"])
    if ns not in netns_list():
        raise RuntimeError(f"network namespace {ns} is gone: `labctl down`, then `labctl up`")
    made = []
    for veth in plan["veths"]:  # type: ignore[attr-defined]
        run("ip", "-n", ns, "link", "del", veth["host"], check=False)  # a stale end
        add_veth(ns, veth)
        made.append(veth["host"])
    return {"netns": ns, "veths": made}


def link(ns: str, veth: str, state: str) -> dict[str, object]:
    """The bridge end down: the container's end loses its carrier, as a pulled cable."""
    if state not in ("up", "down"):
        raise RuntimeError(f"link state must be up or down, not {state!r}")
    run("ip", "-n", ns, "link", "set", veth, state)
    return {"veth": veth, "state": state}


def owner_of(ns: str) -> str:
    """The owner mark on the namespace's loopback (empty: none, an older labctl)."""
    out = run("ip", "-n", ns, "-j", "link", "show", "lo").stdout
    links = json.loads(out) if out.strip() else []
    return str(links[0].get("ifalias", "")) if links else ""


def teardown(ns: str, owner: str = "") -> dict[str, object]:
    if ns not in netns_list():
        return {"removed": []}
    mark = owner_of(ns) if owner else ""
    if mark.startswith(OWNER_PREFIX) and mark != owner:
        return {"removed": [], "kept": f"netns {ns} (a lab of another state directory)"}
    run("ip", "netns", "del", ns)
    return {"removed": [f"netns {ns}"]}


def show(ns: str) -> dict[str, object]:
    names = netns_list()
    links: list[str] = []
    if ns in names:
        out = run("ip", "-n", ns, "-j", "link", "show", check=False).stdout
        links = sorted(link["ifname"] for link in json.loads(out or "[]"))
    root = json.loads(run("ip", "-j", "link", "show", "type", "veth", check=False).stdout or "[]")
    return {
        "netns": names,
        "links": links,
        "rdma_links": [str(link.get("ifname", "")) for link in rdma_links()],
        "root_veths": sorted(link["ifname"] for link in root),
    }


def probe() -> dict[str, object]:
    """Does one rxe per network namespace carry RC traffic in this kernel?"""
    tag = f"{os.getpid() % 100000}"
    a, b = f"labctl-probe-a{tag}", f"labctl-probe-b{tag}"
    dev_a, dev_b = f"rxe_probe_a{tag}", f"rxe_probe_b{tag}"
    steps: list[str] = []
    server = None
    try:
        if run("modprobe", "rdma_rxe", check=False).returncode != 0:
            return {"ok": False, "detail": "modprobe rdma_rxe failed: no Soft-RoCE in this kernel"}
        run("modprobe", "ib_uverbs", check=False)
        for ns in (a, b):
            run("ip", "netns", "add", ns)
        run("ip", "-n", a, "link", "add", "eth1", "type", "veth", "peer", "name", "eth1",
            "netns", b)
        for ns, addr, dev in ((a, "10.255.255.1/30", dev_a), (b, "10.255.255.2/30", dev_b)):
            run("ip", "-n", ns, "addr", "add", addr, "dev", "eth1")
            run("ip", "-n", ns, "link", "set", "eth1", "up")
            run("ip", "-n", ns, "link", "set", "lo", "up")
            run("ip", "netns", "exec", ns, "rdma", "link", "add", dev, "type", "rxe",
                "netdev", "eth1")
        steps.append("two rxe devices made, one per netns")
        time.sleep(0.5)  # the GIDs of the new addresses
        pingpong = ["ibv_rc_pingpong", "-g", "1", "-n", "5", "-s", "1024"]
        server = subprocess.Popen(["ip", "netns", "exec", a, "timeout", "20", *pingpong,
                                   "-d", dev_a], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        time.sleep(1.0)
        client = run("ip", "netns", "exec", b, "timeout", "20", *pingpong, "-d", dev_b,
                     "10.255.255.1", check=False, timeout=30)
        server_out, _ = server.communicate(timeout=30)
        ok = client.returncode == 0 and server.returncode == 0
        detail = "RC pingpong between two namespaces passed" if ok else (
            f"RC pingpong failed: {(client.stdout + client.stderr).strip()[-300:]}"
            f" / server: {server_out.strip()[-300:]}")
        return {"ok": ok, "detail": detail, "steps": steps}
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return {"ok": False, "detail": str(exc), "steps": steps}
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait()
        for dev in (dev_a, dev_b):
            run("rdma", "link", "delete", dev, check=False)
        for ns in (a, b):
            if ns in netns_list():
                run("ip", "netns", "del", ns, check=False)


# labctl's reply format (nodeside/reply.py; copied, as this file is sent alone: a unit
# test holds the copies to it)
REPLY_KEY, REPLY_VERSION = "labctl_reply", 1


def reply_line(data: object) -> str:
    return json.dumps({REPLY_KEY: REPLY_VERSION, "ok": True, "data": data}, separators=(",", ":"))


def reply_error_line(message: str) -> str:
    return json.dumps({REPLY_KEY: REPLY_VERSION, "ok": False, "error": message},
                      separators=(",", ":"))


def answer(command: str, args: list[str]) -> object:
    if command == "facts":
        return facts()
    if command == "plumb":
        return plumb(json.loads(args[0]))
    if command == "replug":
        return replug(json.loads(args[0]))
    if command == "link":
        return link(args[0], args[1], args[2])
    if command == "teardown":
        return teardown(args[0], args[1] if len(args) > 1 else "")
    if command == "show":
        return show(args[0])
    if command == "probe":
        return probe()
    raise ValueError(f"unknown command {command!r}")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        result = answer(argv[0], argv[1:])
    except (RuntimeError, subprocess.TimeoutExpired, IndexError, ValueError) as exc:
        print(reply_error_line(str(exc)))
        return 1
    print(reply_line(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
