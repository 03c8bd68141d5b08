#!/usr/bin/env python3
"""Up/down cycles of a two-node lab, counting everything each cycle leaves behind.

Run as root from the repository:  python3 benchmarks/cycles.py --cycles 20
The integration test tests/integration/test_reliability_lifecycle.py runs the same code
with LABCTL_CYCLES cycles (default 3).

Each cycle runs up and destroy in this process (labctl/lab/lifecycle.py, as the CLI calls
them), so that a file descriptor, thread or child process labctl forgets shows up here.
Counted before the first cycle, while each lab is up, and after each `down`:
  lab:  its netns, links inside it (bridges, taps), qemu processes, ssh masters and
        sessions, lab directory, lock file, sockets of the lab's ControlPath
  self: this process's open fds, threads, child processes (zombies included)
  host: the host's interfaces (name, flags, mtu, master, addresses), routes (IPv4 and
        IPv6, every table), policy rules, and net.* sysctls (global, all, default)
Prints one line per cycle and a Markdown summary; exit 1 if anything leaked.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from labctl.lab import lifecycle  # noqa: E402
from labctl.net import labnet  # noqa: E402
from labctl.paths import state_root  # noqa: E402
from labctl.vm.machine import qemu_pids_in  # noqa: E402

SYSCTL_DIRS = ("ipv4/conf/all", "ipv4/conf/default", "ipv6/conf/all", "ipv6/conf/default",
               "bridge")
SYSCTL_FILES = ("ipv4/ip_forward", "ipv4/ip_local_port_range", "ipv4/ping_group_range",
                "ipv4/ip_nonlocal_bind", "ipv4/tcp_syncookies", "core/rmem_max",
                "core/wmem_max", "core/rmem_default", "core/wmem_default",
                "core/somaxconn", "ipv4/neigh/default/gc_thresh3")
_ROUTE_KEYS = ("type", "dst", "gateway", "dev", "table", "protocol", "scope", "prefsrc",
               "metric", "flags")


def _ip_json(*args: str) -> Any:
    out = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout or "[]")


def host_snapshot() -> dict[str, Any]:
    """The host's own network configuration (the initial namespace)."""
    interfaces = sorted(
        (link["ifname"], tuple(sorted(link.get("flags", []))), link.get("mtu"),
         link.get("master", ""),
         tuple(sorted(f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", []))))
        for link in _ip_json("addr", "show")
    )
    routes = sorted(
        tuple(str(r.get(k, "")) for k in _ROUTE_KEYS)
        for family in ("-4", "-6") for r in _ip_json(family, "route", "show", "table", "all")
    )
    rules = sorted(json.dumps(r, sort_keys=True) for family in ("-4", "-6")
                   for r in _ip_json(family, "rule", "show"))
    sysctls: dict[str, str] = {}
    base = Path("/proc/sys/net")
    files = [base / f for f in SYSCTL_FILES]
    for d in SYSCTL_DIRS:
        if (base / d).is_dir():
            files += sorted(p for p in (base / d).iterdir() if p.is_file())
    for path in files:
        with contextlib.suppress(OSError):  # absent, or write-only (stable_secret)
            sysctls[str(path.relative_to(base)).replace("/", ".")] = path.read_text().strip()
    return {"interfaces": interfaces, "routes": routes, "rules": rules, "sysctls": sysctls}


def lab_snapshot(name: str) -> dict[str, list[str]]:
    """Everything of lab `name` on the host: each list is empty once the lab is gone."""
    procs = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    labdir = state_root() / name
    ssh = [p for p in procs if "ssh" in p and f"{labdir}/" in p]
    ns = labnet.netns_name(name)
    has_ns = ns in labnet.lab_namespaces()
    return {
        "netns": [ns] if has_ns else [],
        "links in netns": [n for n in labnet.links_in(ns) if n != "lo"] if has_ns else [],
        "qemu": [str(pid) for pid in qemu_pids_in(labdir)],
        "ssh masters": [p.strip() for p in ssh if "ControlMaster=yes" in p],
        # the helper starts `up` leaves running (start_detached); gone after `down`
        "ssh sessions": [p.strip() for p in ssh if "ControlMaster=yes" not in p],
        "lab dir": [str(labdir)] if labdir.exists() else [],
        "lock": [str(labdir / "lock")] if (labdir / "lock").exists() else [],
    }


def self_snapshot() -> dict[str, Any]:
    """This process: open fds (with what they point to), threads, children."""
    gc.collect()  # an fd that only waits for the garbage collector is not a leak
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            fds[int(fd)] = os.readlink(f"/proc/self/fd/{fd}")
    me = str(os.getpid())
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[1] == me:
                children.append(f"{stat.parent.name} ({fields[0]})")
    threads = len(os.listdir("/proc/self/task"))
    return {"fds": fds, "threads": threads, "children": sorted(children)}


def leaks(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What `after` has that `before` had not (fds by number and target)."""
    found = []
    for key in ("interfaces", "routes", "rules"):
        if key in before:
            for item in sorted(set(after[key]) ^ set(before[key])):
                sign = "+" if item in after[key] else "-"
                found.append(f"host {key} {sign} {item}")
    if "sysctls" in before:
        for key in sorted(set(before["sysctls"]) | set(after["sysctls"])):
            if before["sysctls"].get(key) != after["sysctls"].get(key):
                found.append(f"host sysctl {key}: {before['sysctls'].get(key)!r} -> "
                             f"{after['sysctls'].get(key)!r}")
    if "fds" in before:
        extra = {fd: t for fd, t in after["fds"].items() if before["fds"].get(fd) != t}
        found += [f"fd {fd} -> {target}" for fd, target in sorted(extra.items())]
        if after["threads"] > before["threads"]:
            found.append(f"threads {before['threads']} -> {after['threads']}")
        found += [f"child {c}" for c in after["children"] if c not in before["children"]]
    return found


def lab_topology(name: str, directory: Path) -> Path:
    data = yaml.safe_load((REPO / "topologies/two-node.yaml").read_text())
    data["name"] = name
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def cycle(topology: Path, name: str, timeout: float = 300) -> dict[str, Any]:
    """One in-process up + destroy (the lifecycle service, as `labctl up`/`down` call it);
    what was up, and what is left."""
    started = time.monotonic()
    lifecycle.up(topology, lifecycle.UpOptions(timeout=timeout))
    up_seconds = time.monotonic() - started
    during = lab_snapshot(name)
    host_during = host_snapshot()
    started = time.monotonic()
    removed = lifecycle.destroy(name)
    return {"up_s": up_seconds, "down_s": time.monotonic() - started, "during": during,
            "host_during": host_during, "removed": removed, "after": lab_snapshot(name)}


def run_cycles(count: int, name: str, report: Any = print) -> dict[str, Any]:
    """`count` cycles; returns the figures and every leak found (none expected)."""
    found: list[str] = []
    figures: dict[str, Any] = {"cycles": 0, "up_s": [], "down_s": [], "leaks": found,
                               "counted": []}
    with tempfile.TemporaryDirectory() as tmp:
        topology = lab_topology(name, Path(tmp))
        if any(lab_snapshot(name).values()):
            raise SystemExit(f"lab {name} exists already: `labctl down --lab {name}` first")
        host0, self0 = host_snapshot(), self_snapshot()
        for index in range(1, count + 1):
            result = cycle(topology, name)
            during = result["during"]
            figures["counted"].append({k: len(v) for k, v in during.items()})
            if not (during["netns"] and len(during["qemu"]) == 2
                    and len(during["ssh masters"]) == 2 and during["lab dir"]):
                found.append(f"cycle {index}: the lab was not fully up: {during}")
            for item in leaks(host0, result["host_during"]):
                found.append(f"cycle {index} (lab up): {item}")
            left = {k: v for k, v in result["after"].items() if v}
            found += [f"cycle {index}: {k} left: {v}" for k, v in left.items()]
            after = {**host_snapshot(), **self_snapshot()}
            found += [f"cycle {index}: {item}" for item in leaks({**host0, **self0}, after)]
            figures["cycles"] = index
            figures["up_s"].append(round(result["up_s"], 1))
            figures["down_s"].append(round(result["down_s"], 1))
            report(f"cycle {index}/{count}: up {result['up_s']:.1f} s, down "
                   f"{result['down_s']:.1f} s, during {figures['counted'][-1]}, "
                   f"leaks so far {len(found)}")
        figures["fds"] = len(self0["fds"])
        figures["sysctls"] = len(host0["sysctls"])
        figures["host interfaces"] = len(host0["interfaces"])
        figures["routes"] = len(host0["routes"])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--lab", default="bench-cycles", help="lab name (default bench-cycles)")
    args = parser.parse_args()
    figures = run_cycles(args.cycles, args.lab)
    up_s, down_s = sorted(figures["up_s"]), sorted(figures["down_s"])
    print(f"\n| cycles | up (min/median/max) | down (min/median/max) | leaks |\n|---|---|---|---|\n"
          f"| {figures['cycles']} | {up_s[0]} / {up_s[len(up_s) // 2]} / {up_s[-1]} s | "
          f"{down_s[0]} / {down_s[len(down_s) // 2]} / {down_s[-1]} s | "
          f"{len(figures['leaks'])} |")
    print(f"watched: {figures['fds']} fds of this process, {figures['host interfaces']} host "
          f"interfaces, {figures['routes']} routes, {figures['sysctls']} net sysctls")
    for item in figures["leaks"]:
        print(f"LEAK {item}")
    sys.exit(1 if figures["leaks"] else 0)


if __name__ == "__main__":
    main()
