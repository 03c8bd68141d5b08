#!/usr/bin/env python3
"""Lab bring-up figures: warm `labctl up` to all devices ACTIVE, qemu RSS and PSS per node,
`labctl down`, and RC pingpong cost per iteration, for two- and four-node labs.

Run as root from the repository:  python3 benchmarks/bringup.py --runs 3
Under another lab name:           python3 benchmarks/bringup.py --lab perf topologies/two-node.yaml
Cold image build:                 python3 benchmarks/bringup.py --cold-image
Cold boot against restore:        python3 benchmarks/bringup.py --runs 5 --boot cold,restore
  (the modes take turns, run by run: a shared host's load falls on both alike; the saved
  machine is made before the first measured run)
The curve over lab sizes:
  python3 benchmarks/bringup.py --lab bench --runs 3 --sizes 2,4,8,16 --plot curve.png
  (one switch of N restored nodes per size: `up` to every port ACTIVE, PSS per node, and
  the idle lab's CPU: its qemu processes' CPU time over --idle-window seconds, starting
  --idle-after seconds after `up`; --plot draws the three against the size, png or svg)
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
    parser.add_argument("--sizes", help="the curve: lab sizes, comma-separated (2,4,8,16); "
                        "one switch of that many restored nodes each, instead of topologies")
    parser.add_argument("--idle-after", type=float, default=30.0,
                        help="the curve: seconds after `up` before the idle CPU is measured")
    parser.add_argument("--idle-window", type=float, default=20.0,
                        help="the curve: seconds over which the idle CPU is measured")
    parser.add_argument("--plot", type=Path, help="the curve: draw it to this .png or .svg")
    args = parser.parse_args()
    if args.cold_image:
        cold_image()
        return
    if args.sizes:
        curve(args)
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


# --- the curve over lab sizes --------------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def sized_topology(nodes: int, lab: str, workdir: Path) -> str:
    """One switch of `nodes` rxe nodes (the shipped sixteen-node lab's shape), as lab `lab`."""
    names = [f"node{i}" for i in range(1, nodes + 1)]
    path = workdir / f"{lab}-{nodes}.yaml"
    path.write_text(f"name: {lab}\nnodes:\n" + "".join(f"  {n}: {{}}\n" for n in names)
                    + "links:\n  - name: lan\n    endpoints: ["
                    + ", ".join(f"{n}:eth1" for n in names) + "]\n")
    return str(path)


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU time the processes have used so far, every thread's (utime and
    stime of /proc/PID/stat; a process that ended counts nothing)."""
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        total += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15
    return total / CLOCK_TICKS


def idle_cores(lab: str, window: float) -> float:
    """The lab's qemu processes' CPU over `window` seconds, in cores (1.0: one core busy)."""
    pids = qemu_pids_in(LabDir(lab).path)
    before, started = cpu_seconds(pids), time.monotonic()
    time.sleep(window)
    return (cpu_seconds(pids) - before) / (time.monotonic() - started)


def timed_status(lab: str) -> float:
    return timed("status", "--lab", lab)


def curve_point(lab: str, topology: str, nodes: int, args: argparse.Namespace,
                figures: dict[str, list[float]]) -> None:
    labctl("down", "--lab", lab)
    figures["load"].append(os.getloadavg()[0])
    figures["up"].append(timed("up", topology, "--boot", "restore"))
    up_done = time.monotonic()
    _rss, pss = qemu_memory_mib(lab)
    if len(pss) != nodes:
        raise SystemExit(f"lab {lab}: {len(pss)} qemu processes for {nodes} nodes")
    figures["pss"].append(statistics.median(pss))
    figures["pss_total"].append(sum(pss))
    figures["status"].append(timed_status(lab))
    time.sleep(max(0.0, args.idle_after - (time.monotonic() - up_done)))
    cores = idle_cores(lab, args.idle_window)
    figures["idle"].append(cores)
    figures["idle_per_node"].append(cores / nodes)
    figures["down"].append(timed("down", "--lab", lab))


def curve(args: argparse.Namespace) -> None:
    sizes = [int(size) for size in args.sizes.split(",")]
    lab = args.lab or "bench"
    if args.plot is not None and args.plot.suffix not in (".png", ".svg"):
        raise SystemExit("--plot: a .png or .svg file")
    print(f"load average at start: {os.getloadavg()[0]:.2f}, runs: {args.runs}, "
          f"idle CPU over {args.idle_window:.0f} s from {args.idle_after:.0f} s after up")
    results: dict[int, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as workdir:
        topologies = {n: sized_topology(n, lab, Path(workdir)) for n in sizes}
        try:
            for _ in range(args.runs):  # sizes take turns: a shared host's load falls on all
                for nodes in sizes:
                    figures = results.setdefault(nodes, {key: [] for key in (
                        "up", "pss", "pss_total", "status", "idle", "idle_per_node", "down",
                        "load")})
                    curve_point(lab, topologies[nodes], nodes, args, figures)
        finally:
            labctl("down", "--lab", lab)
    print("| nodes | labctl up (restored, to ACTIVE) | per node | qemu PSS per node | "
          "PSS of the lab | labctl status | idle lab CPU (cores) | idle CPU per node | "
          "labctl down | load average before up |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for nodes, f in results.items():
        per_node = [up / nodes for up in f["up"]]
        print(f"| {nodes} | {fmt(f['up'])} | {fmt2(per_node, 's')} | {fmt(f['pss'], 'MiB')} | "
              f"{fmt(f['pss_total'], 'MiB')} | {fmt2(f['status'], 's')} | "
              f"{fmt2(f['idle'], '', 3)} | {fmt2(f['idle_per_node'], '', 4)} | "
              f"{fmt(f['down'])} | "
              f"{fmt(f['load'], '')} |")
    if args.plot is not None:
        plot_curve(results, args.plot)
        print(f"plot: {args.plot}")


def fmt2(values: list[float], unit: str, digits: int = 2) -> str:
    return (f"{min(values):.{digits}f} / {statistics.median(values):.{digits}f} / "
            f"{max(values):.{digits}f} {unit}".rstrip() if values else "-")


def plot_curve(results: dict[int, dict[str, list[float]]], path: Path) -> None:
    """Three panels against the lab's size: up time, PSS per node, idle CPU; the median
    with the min-max range as error bars."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(results)
    panels = [("up", "labctl up, restored (s)"), ("pss", "qemu PSS per node (MiB)"),
              ("idle", "idle lab CPU (cores)")]
    figure, axes = plt.subplots(1, len(panels), figsize=(12, 3.6))
    for axis, (key, title) in zip(axes, panels, strict=True):
        medians = [statistics.median(results[n][key]) for n in sizes]
        low = [m - min(results[n][key]) for m, n in zip(medians, sizes, strict=True)]
        high = [max(results[n][key]) - m for m, n in zip(medians, sizes, strict=True)]
        axis.errorbar(sizes, medians, yerr=[low, high], marker="o", capsize=3)
        if key != "pss":  # what linear growth from the smallest lab would give
            axis.plot(sizes, [medians[0] * n / sizes[0] for n in sizes], ls="--",
                      color="grey", label="linear from the smallest")
            axis.legend(fontsize=8)
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("nodes")
        axis.set_xticks(sizes)
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)


if __name__ == "__main__":
    main()
