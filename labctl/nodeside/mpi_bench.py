"""Run by every rank of `labctl run mpi` (mpirun ... python3 -m labctl.nodeside.mpi_bench):
mpi4py's own ping-pong benchmark between ranks 0 and 1, then an allreduce over all ranks
whose result rank 0 checks. Rank 0 prints; labctl.runners.mpi parses it.

Output (rank 0): mpi4py.bench's pingpong table, then one line
    labctl-allreduce: ranks N iterations I sum S expected E usec_mean M usec_max X
"""

from __future__ import annotations

import argparse
import sys

from mpi4py import MPI
from mpi4py.bench import pingpong


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mpi_bench")
    parser.add_argument("--min-size", type=int, default=8)
    parser.add_argument("--max-size", type=int, default=1024)
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args(argv)
    comm = MPI.COMM_WORLD
    skip = max(1, args.iters // 10)
    pingpong(comm, ["-m", str(args.min_size), "-n", str(args.max_size),
                    "-l", str(args.iters), "-s", str(skip)])
    sys.stdout.flush()
    # Each rank adds rank + 1: the sum is N(N+1)/2, checked on every iteration.
    expected = comm.size * (comm.size + 1) // 2
    value = comm.rank + 1
    wrong = 0
    times = []
    comm.Barrier()
    for _ in range(args.iters):
        start = MPI.Wtime()
        total = comm.allreduce(value, op=MPI.SUM)
        times.append(MPI.Wtime() - start)
        wrong += total != expected
    worst = comm.allreduce(max(times), op=MPI.MAX)
    mean = comm.allreduce(sum(times) / len(times), op=MPI.SUM) / comm.size
    wrong = comm.allreduce(wrong, op=MPI.SUM)
    if comm.rank == 0:
        print(f"labctl-allreduce: ranks {comm.size} iterations {args.iters} sum {total} "
              f"expected {expected} wrong {wrong} usec_mean {mean * 1e6:.1f} "
              f"usec_max {worst * 1e6:.1f}", flush=True)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
