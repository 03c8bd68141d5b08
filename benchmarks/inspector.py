#!/usr/bin/env python3
"""Wall time of `labctl devinfo -v` against C `ibv_devinfo -v`, in a node and through the CLI.

Run as root from the repository, with a lab up:
    python3 benchmarks/inspector.py --lab NAME [--node node1] [--runs 7]

In the node (one timing program there, commands run in turn so that a drift of the host's
load hits all of them alike; the direct path in rounds of its own, with C, after the rest):
  c          ibv_devinfo -v
  helper     labctl-devinfo -v     (in a qemu node the image's compiled client of the node's
             helper, which has pyverbs imported; elsewhere the Python wrapper below)
  wrapper    /usr/local/lib/labctl/labctl-devinfo -v   (python3 -S; through the helper too)
  module     python3 -m labctl.verbs devinfo -v   (with site; through the helper too)
  direct     LABCTL_VERBS_DIRECT=1 labctl-devinfo -v   (imports pyverbs itself: the old path)
Through the CLI on the host, in turn:
  c          labctl exec NODE -- ibv_devinfo -v
  labctl     labctl devinfo NODE -v
  direct     labctl exec NODE -- env LABCTL_VERBS_DIRECT=1 labctl-devinfo -v
Each: min / median / max wall seconds, and the ratio to C (median of per-round ratios).
Every output is checked against the C tool's stdout first (exit 1 if one differs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LABCTL = [sys.executable, "-m", "labctl"]

NODE_COMMANDS = {
    "c": "ibv_devinfo -v",
    "helper": "labctl-devinfo -v",
    "wrapper": "/usr/local/lib/labctl/labctl-devinfo -v",
    "module": "python3 -m labctl.verbs devinfo -v",
    "direct": "LABCTL_VERBS_DIRECT=1 labctl-devinfo -v",
}

# Runs in the node: times each command `runs` times in turn, after one warm-up each. The
# direct path gets rounds of its own after the others (its C figures are kept apart): its
# pyverbs import evicts qemu's translated code (TCG), which slows whatever runs next.
NODE_TIMER = r"""
import json, subprocess, sys, time
cmds, runs = json.loads(sys.argv[1]), int(sys.argv[2])
outs = {k: subprocess.run(c, shell=True, capture_output=True).stdout.decode(errors="replace")
        for k, c in cmds.items()}
times = {k: [] for k in cmds}
times["c_direct"] = []
def rounds(keys, c_key):
    for _ in range(runs):
        for k in keys:
            t = time.perf_counter()
            subprocess.run(cmds[k], shell=True, stdout=subprocess.DEVNULL)
            times[c_key if k == "c" else k].append(time.perf_counter() - t)
rounds([k for k in cmds if k != "direct"], "c")
rounds(["c", "direct"], "c_direct")
print(json.dumps({"times": times, "outs": outs}))
"""


def _host_commands(lab: str, node: str) -> dict[str, list[str]]:
    exec_ = [*LABCTL, "exec", node, "--lab", lab, "--"]
    return {
        "c": [*exec_, "ibv_devinfo", "-v"],
        "labctl": [*LABCTL, "devinfo", node, "-v", "--lab", lab],
        "direct": [*exec_, "env", "LABCTL_VERBS_DIRECT=1", "labctl-devinfo", "-v"],
    }


def in_node(lab: str, node: str, runs: int) -> tuple[dict[str, list[float]], dict[str, str]]:
    proc = subprocess.run(
        [*LABCTL, "exec", node, "--lab", lab, "--", "python3", "-c", NODE_TIMER,
         json.dumps(NODE_COMMANDS), str(runs)],
        capture_output=True, text=True, check=False, cwd=REPO, timeout=60 + 60 * runs,
    )
    if proc.returncode != 0:
        sys.exit(f"timing in {node} failed: {proc.stderr.strip()}")
    data = json.loads(proc.stdout)
    return data["times"], data["outs"]


def through_cli(lab: str, node: str, runs: int) -> tuple[dict[str, list[float]], dict[str, str]]:
    commands = _host_commands(lab, node)
    outs = {k: subprocess.run(argv, capture_output=True, text=True, cwd=REPO).stdout
            for k, argv in commands.items()}
    times: dict[str, list[float]] = {k: [] for k in commands}
    for _ in range(runs):
        for k, argv in commands.items():
            start = time.perf_counter()
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           cwd=REPO, check=False)
            times[k].append(time.perf_counter() - start)
    return times, outs


def table(title: str, times: dict[str, list[float]], labels: dict[str, str]) -> str:
    rows = [f"{title}", "",
            "| command | min | median | max | median ratio to C |", "|---|---|---|---|---|"]
    for key, xs in times.items():
        c = times["c_direct"] if key in ("direct", "c_direct") and "c_direct" in times \
            else times["c"]
        ratio = statistics.median(x / y for x, y in zip(xs, c, strict=True))
        rows.append(f"| `{labels[key]}` | {min(xs):.3f} s | {statistics.median(xs):.3f} s | "
                    f"{max(xs):.3f} s | {ratio:.2f} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lab", required=True)
    parser.add_argument("--node", default="node1")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (labctl needs it)")

    bad = []
    node_times, node_outs = in_node(args.lab, args.node, args.runs)
    for key, out in node_outs.items():
        if out != node_outs["c"]:
            bad.append(f"in the node: {NODE_COMMANDS[key]}")
    cli_times, cli_outs = through_cli(args.lab, args.node, args.runs)
    labels = {k: " ".join(v[2:]) for k, v in _host_commands(args.lab, args.node).items()}
    for key, out in cli_outs.items():
        if out != node_outs["c"]:
            bad.append(f"through the CLI: {labels[key]}")
    load = os.getloadavg()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} host CPUs, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {args.runs} runs each, "
          "wall seconds\n")
    node_labels = {**NODE_COMMANDS, "c_direct": NODE_COMMANDS["c"] + " (the direct rounds)"}
    print(table(f"In {args.node} of lab {args.lab}:", node_times, node_labels))
    print()
    print(table("Through the CLI on the host:", cli_times, labels))
    if bad:
        print("\noutput differs from ibv_devinfo -v: " + "; ".join(bad))
        sys.exit(1)
    print("\nevery output above is byte-identical to ibv_devinfo -v's")


if __name__ == "__main__":
    main()
