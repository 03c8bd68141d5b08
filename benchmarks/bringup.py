#!/usr/bin/env python3
"""Lab bring-up figures: warm `labctl up` to all devices ACTIVE, qemu RSS and PSS per node,
`labctl down`, and RC pingpong cost per iteration, for two- and four-node labs.

Run as root from the repository:  python3 benchmarks/bringup.py --runs 3
Under another lab name:           python3 benchmarks/bringup.py --lab perf topologies/two-node.yaml
Cold image build:                 python3 benchmarks/bringup.py --cold-image
Cold boot against restore:        python3 benchmarks/bringup.py --runs 5 --boot cold,restore
  (the modes take turns, run by run: a shared host's load falls on both alike; the saved
  machine is made before the first measured run)
Prints a Markdown table (min / median / max over the runs) for docs/performance.md, with
memory measured right after the pingpong and again --settle seconds later (the node has
reclaimed its page cache after the helper's import, and the balloon has reported the freed
pages), then a second pingpong and memory --settle seconds after it ("after use"), and
the bring-up profile: when each stage began in the nodes' own clocks (guest seconds since
power on; kernel stages from dmesg, labctl's stages from the console's `labctl: stage`
lines).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from labctl.store.labdir import LabDir  # noqa: E402
from labctl.vm.machine import qemu_pids_in  # noqa: E402


def labctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "labctl", *args], capture_output=True,
                          text=True, cwd=REPO, env=env, check=False)


def timed(*args: str, env: dict[str, str] | None = None) -> float:
    started = time.monotonic()
    result = labctl(*args, env=env)
    if result.returncode != 0:
        raise SystemExit(f"labctl {' '.join(args)} failed:\n{result.stderr}")
    return time.monotonic() - started


def qemu_memory_mib(lab: str) -> tuple[list[float], list[float]]:
    """Resident (Rss) and proportional (Pss) memory of the lab's qemu processes (found
    exactly, by their -pidfile). Pss splits a page shared by N processes N ways (the mapped
    kernel file, qemu's libraries): the memory a node really adds to the host."""
    rss, pss = [], []
    for pid in qemu_pids_in(LabDir(lab).path):
        rollup = dict(line.split()[:2] for line in
                      Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
        rss.append(int(rollup["Rss:"]) / 1024)
        pss.append(int(rollup["Pss:"]) / 1024)
    return rss, pss


# guest-clock milestones of one boot, in order
KERNEL_MARKS = {"initcalls done": "Freeing unused kernel image (initmem)",
                "/init (stage 1)": "Run /init as init process",
                "root disk mounted": "EXT4-fs (vda): mounted"}
_STAGE = re.compile(r"labctl: (?:stage (\S+)|(ready)) .*?\[t=([\d.]+)\]")
_DMESG = re.compile(r"^\[\s*([\d.]+)\] (.*)$", re.M)


def stage_profile(lab: str) -> dict[str, list[float]]:
    """milestone -> guest seconds at which it happened, one value per node."""
    profile: dict[str, list[float]] = {}
    labdir = LabDir(lab)
    for node in labdir.load_state().nodes:
        dmesg = labctl("exec", node, "--lab", lab, "--", "dmesg").stdout
        for name, needle in KERNEL_MARKS.items():
            hit = next((float(t) for t, line in _DMESG.findall(dmesg) if needle in line), None)
            if hit is not None:
                profile.setdefault(name, []).append(hit)
        console = (labdir.path / "nodes" / node / "console.log").read_text(errors="replace")
        for stage, ready, at in _STAGE.findall(console):
            profile.setdefault(stage or ready, []).append(float(at))
    return profile


def fmt(values: list[float], unit: str = "s") -> str:
    return (f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f} {unit}"
            if values else "-")


def renamed(topology: str, lab: str, workdir: Path) -> str:
    """The topology under another lab name (a copy in workdir)."""
    import yaml

    data = yaml.safe_load(Path(topology).read_text())
    data["name"] = lab
    path = workdir / f"{lab}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def pingpong_usec(lab: str, iters: int) -> list[float]:
    """One RC 4 KiB pingpong's usec/iter, as a list: empty when the run failed."""
    run = labctl("run", "pingpong", "--lab", lab, "--size", "4096", "--iters", str(iters),
                 "--json")
    if run.returncode != 0:
        return []
    (record,) = json.loads(run.stdout)["records"]  # docs/json.md
    return [record["figures"]["usec_per_iter"]]


def new_figures() -> dict[str, list[float]]:
    return {"up": [], "ready": [], "rss": [], "pss": [], "down": [], "rss_settled": [],
            "pss_settled": [], "usec_settled": [], "rss_used": [], "pss_used": [],
            "usec_per_iter": [], "load": []}


def bench_topology(topology: str, runs: int, iters: int, settle: float,
                   profile: dict[str, list[float]] | None = None, boot: str = "cold",
                   figures: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    lab = json.loads(labctl("validate", topology, "--json").stdout)["name"]
    figures = new_figures() if figures is None else figures

    def add_memory(suffix: str) -> None:
        rss, pss = qemu_memory_mib(lab)
        figures["rss" + suffix] += rss
        figures["pss" + suffix] += pss

    for _ in range(runs):
        labctl("down", "--lab", lab)
        figures["load"].append(os.getloadavg()[0])
        figures["up"].append(timed("up", topology, "--boot", boot))
        figures["ready"].append(float(LabDir(lab).load_state().ready_seconds or 0))
        if profile is not None:
            for stage, values in stage_profile(lab).items():
                profile.setdefault(stage, []).extend(values)
        figures["usec_per_iter"] += pingpong_usec(lab, iters)
        add_memory("")  # after the pingpong: a node in use
        # Settled: the helper has imported, the node reclaimed its page cache after it
        # (start-helper.sh --vm) and the balloon reported the freed pages (2 s delay).
        time.sleep(settle)
        add_memory("_settled")
        figures["usec_settled"] += pingpong_usec(lab, iters)
        # After use: what the second pingpong read back (its programs, ssh sessions) stays
        # in the node's cache; only free pages are reported.
        time.sleep(settle)
        add_memory("_used")
        figures["down"].append(timed("down", "--lab", lab))
    return figures


def cold_image() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "LABCTL_CACHE_DIR": cache}
        cold = timed("image", "build", env=env)
        warm = [timed("image", "build", env=env) for _ in range(3)]
        manifest = next(Path(cache, "images").glob("*/manifest.json"))
        size = sum(f.stat().st_blocks * 512 for f in manifest.parent.iterdir()) / 2**20
    print(f"| cold image build | {cold:.1f} s | (image on disk {size:.0f} MiB) |")
    print(f"| warm image build | {fmt(warm)} | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--iters", type=int, default=500)
    parser.add_argument("--cold-image", action="store_true")
    parser.add_argument("--settle", type=float, default=15.0,
                        help="seconds after the pingpong before memory is measured again")
    parser.add_argument("--lab", help="run each topology under this lab name")
    parser.add_argument("--boot", default="restore",
                        help="cold, restore or both (cold,restore): taking turns run by run")
    parser.add_argument("topologies", nargs="*",
                        default=["topologies/two-node.yaml", "topologies/four-node.yaml"])
    args = parser.parse_args()
    if args.cold_image:
        cold_image()
        return
    print(f"load average at start: {os.getloadavg()[0]:.2f}, runs: {args.runs}")
    rows, profiles = [], {}
    with tempfile.TemporaryDirectory() as workdir:
        for topology in args.topologies:
            name = Path(topology).stem  # the file's, also under --lab
            if args.lab:
                topology = renamed(topology, args.lab, Path(workdir))
            boots = args.boot.split(",")
            if "restore" in boots:  # the saved machine is made once, before any measure
                timed("up", topology, "--boot", "restore")
            profile: dict[str, list[float]] = {}
            per_boot = {boot: new_figures() for boot in boots}
            for _ in range(args.runs):
                for boot in boots:
                    bench_topology(topology, 1, args.iters, args.settle,
                                   profile if boot == "cold" else None, boot, per_boot[boot])
            labctl("down", "--lab", json.loads(labctl("validate", topology, "--json")
                                                .stdout)["name"])
            for boot, f in per_boot.items():
                rows.append(
                    f"| {name} ({boot}) | {fmt(f['up'])} | {fmt(f['ready'])} | "
                    f"{fmt(f['rss'], 'MiB')} | {fmt(f['pss'], 'MiB')} | "
                    f"{fmt(f['rss_settled'], 'MiB')} | {fmt(f['pss_settled'], 'MiB')} | "
                    f"{fmt(f['down'])} | {fmt(f['usec_per_iter'], 'us')} | "
                    f"{fmt(f['usec_settled'], 'us')} | {fmt(f['rss_used'], 'MiB')} | "
                    f"{fmt(f['load'], '')} |")
            profiles[name] = profile
    print("| topology | labctl up (to ACTIVE) | boot to ready | qemu RSS per node | "
          f"qemu PSS per node | RSS {args.settle:.0f} s later | PSS {args.settle:.0f} s later | "
          f"labctl down | RC 4 KiB usec/iter | the same, settled | RSS {args.settle:.0f} s after "
          "it | load average before up |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    for name, profile in profiles.items():
        print(f"\nbring-up profile of {name}: guest seconds since power-on, "
              "min / median / max over nodes and runs")
        print("| milestone | guest seconds |\n|---|---|")
        for stage, values in sorted(profile.items(), key=lambda kv: statistics.median(kv[1])):
            print(f"| {stage} | {fmt(values)} |")

if __name__ == "__main__":
    main()
