"""RDMA against TCP for the workloads (docs/workloads.md), on the same nodes of a lab.

    python benchmarks/workloads.py --lab LAB [--rxe A:B] [--siw C:D]

Each entry of WORKLOADS is one `labctl run` command whose --json record holds both the
RDMA and the TCP figures (rdma_latency_us, tcp_latency_us, rdma_bw_mb_per_s,
tcp_bw_mb_per_s). Adding a workload: an entry with its name, its `labctl run` arguments
and the figures to show. Under TCG (no KVM) the figures measure the emulation more than
the stacks: compare RDMA with TCP on the same run, not with real hardware.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

FIGURES = ("rdma_latency_us", "tcp_latency_us", "rdma_bw_mb_per_s", "tcp_bw_mb_per_s")


@dataclass(frozen=True)
class Workload:
    name: str
    argv: tuple[str, ...]  # `labctl run ...` without --lab, --server, --client, --json
    figures: tuple[str, ...] = FIGURES


WORKLOADS: tuple[Workload, ...] = (
    Workload("qperf", ("qperf", "--duration", "2", "--tests",
                       "rc_lat,rc_bi_bw,tcp_lat,tcp_bw")),
    Workload("qperf rc_bw", ("qperf", "--duration", "2", "--tests", "rc_bw"),
             ("rdma_bw_mb_per_s",)),
    Workload("libfabric 4 KiB", ("fabric", "--size", "4096", "--iters", "100")),
    Workload("libfabric 64 KiB", ("fabric", "--size", "65536", "--iters", "50")),
)


def run(lab: str, workload: Workload, server: str, client: str) -> dict[str, Any]:
    argv = [sys.executable, "-m", "labctl", "run", *workload.argv, "--lab", lab,
            "--server", server, "--client", client, "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    try:
        (record,) = json.loads(done.stdout)["records"]  # docs/json.md: one pair, one record
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        return {"status": "failed", "reason": done.stderr.strip()[-200:], "figures": {}}
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--lab", required=True)
    parser.add_argument("--rxe", default="rxe1:rxe2", help="server:client of rxe nodes")
    parser.add_argument("--siw", default="siw1:siw2", help="server:client of siw nodes "
                        "('' to leave out)")
    args = parser.parse_args()
    pairs = [("rxe", p) for p in [args.rxe] if p] + [("siw", p) for p in [args.siw] if p]
    header = f"{'workload':<18} {'device':<6} " + " ".join(f"{f:>17}" for f in FIGURES)
    print(header)
    print("-" * len(header))
    failed = False
    for workload in WORKLOADS:
        for device, pair in pairs:
            server, _, client = pair.partition(":")
            record = run(args.lab, workload, server, client)
            figures = record.get("figures", {})
            cells = [f"{figures[f]:>17g}" if f in workload.figures and f in figures
                     else f"{'-':>17}" for f in FIGURES]
            note = ("" if record.get("status") == "passed"
                    else f"  {record.get('status')}: {record.get('reason', '')}")
            failed |= record.get("status") == "failed"
            print(f"{workload.name:<18} {device:<6} " + " ".join(cells) + note, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
