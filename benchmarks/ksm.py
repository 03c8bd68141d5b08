#!/usr/bin/env python3
"""What a lab's nodes cost the host with and without KSM (the host kernel merging identical
pages): qemu already marks guest RAM mergeable (its default `mem-merge=on`), so nodes that
boot the same kernel and image share many identical pages once the host runs ksmd.

Run as root from the repository, with no other lab or CI running:
    python3 benchmarks/ksm.py --lab ksm topologies/four-node.yaml
It brings the lab up, measures (KSM off), turns KSM on for --settle seconds, measures again
(pages merged, ksmd's CPU time, each qemu's Rss and Pss, the host's MemAvailable) with an RC
pingpong before and after, then puts KSM's settings back as it found them (unmerging
everything) and takes the lab down. KSM is a host-wide setting: labctl itself never turns
it on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from bringup import labctl, qemu_memory_mib, renamed, timed

KSM = Path("/sys/kernel/mm/ksm")
PAGE_MIB = 4096 / 2**20


def ksm_read(name: str) -> int:
    return int((KSM / name).read_text())


def ksm_write(name: str, value: int) -> None:
    (KSM / name).write_text(f"{value}\n")


def mem_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    raise SystemExit("no MemAvailable in /proc/meminfo")


def ksmd_cpu_seconds() -> float:
    """ksmd's user+system time (the kernel thread's utime+stime, in clock ticks)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text()
        except OSError:
            continue
        if "(ksmd)" in fields:
            after = fields.rsplit(")", 1)[1].split()
            return (int(after[11]) + int(after[12])) / 100  # USER_HZ is 100 on Linux
    return 0.0


def pingpong_usec(lab: str, iters: int) -> float | None:
    run = labctl("run", "pingpong", "--lab", lab, "--size", "4096", "--iters", str(iters),
                 "--json")
    if run.returncode != 0:
        return None
    (record,) = json.loads(run.stdout)["records"]  # docs/json.md
    usec: float = record["figures"]["usec_per_iter"]
    return usec


def snapshot(lab: str, label: str, baseline_mib: float) -> None:
    rss, pss = qemu_memory_mib(lab)
    shared, sharing = ksm_read("pages_shared"), ksm_read("pages_sharing")
    print(f"{label}: qemu Rss per node {statistics.median(rss):.0f} MiB "
          f"(sum {sum(rss):.0f}), Pss per node {statistics.median(pss):.0f} MiB "
          f"(sum {sum(pss):.0f}); host MemAvailable down {baseline_mib - mem_available_mib():.0f}"
          f" MiB since before up; KSM pages_shared {shared * PAGE_MIB:.0f} MiB, "
          f"pages_sharing {sharing * PAGE_MIB:.0f} MiB; ksmd CPU {ksmd_cpu_seconds():.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lab", default="ksm")
    parser.add_argument("--settle", type=int, default=180, help="seconds with KSM on")
    parser.add_argument("--iters", type=int, default=500)
    parser.add_argument("topology", nargs="?", default="topologies/four-node.yaml")
    args = parser.parse_args()
    saved = {name: ksm_read(name) for name in ("run", "pages_to_scan", "sleep_millisecs")}
    if saved["run"] != 0:
        raise SystemExit("KSM is already on here: the 'off' figures would be wrong")
    with tempfile.TemporaryDirectory() as workdir:
        topology = renamed(args.topology, args.lab, Path(workdir))
        labctl("down", "--lab", args.lab)
        time.sleep(5)
        baseline = mem_available_mib()
        print(f"up {timed('up', topology):.1f} s")
        time.sleep(30)  # the inspector's helpers start detached after up
        try:
            snapshot(args.lab, "KSM off", baseline)
            print(f"pingpong 4 KiB, KSM off: {pingpong_usec(args.lab, args.iters)} usec/iter")
            cpu_before = ksmd_cpu_seconds()
            ksm_write("run", 1)
            started = time.monotonic()
            for mark in range(60, args.settle + 1, 60):
                time.sleep(max(0.0, started + mark - time.monotonic()))
                snapshot(args.lab, f"KSM on {mark} s", baseline)
            print(f"ksmd CPU while on: {ksmd_cpu_seconds() - cpu_before:.1f} s "
                  f"in {time.monotonic() - started:.0f} s; full scans {ksm_read('full_scans')}")
            print(f"pingpong 4 KiB, KSM on: {pingpong_usec(args.lab, args.iters)} usec/iter")
            snapshot(args.lab, "KSM on, after the pingpong", baseline)
        finally:
            ksm_write("run", 2)  # unmerge every page before putting the old setting back
            for name, value in saved.items():
                ksm_write(name, value)
            labctl("down", "--lab", args.lab)


if __name__ == "__main__":
    main()
