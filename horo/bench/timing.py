"""Time one variant at one size: per-iteration times (barrier-aligned), the slowest rank's per
iteration, median over iterations; every result (warm-up included) checked against the reference."""
import statistics
import time

import numpy as np


def measure(comm, fn, check, iters, warmup, reset=None):
    """fn() runs the collective and returns its output; check(output) -> wrong element count.
    reset() (optional, untimed) scribbles over a reused output buffer so a no-op cannot pass.
    Returns (median seconds of the slowest rank, total #wrong over all ranks and iterations)."""
    from mpi4py import MPI

    wrong = 0
    times = np.zeros(iters, dtype=np.float64)
    for i in range(warmup + iters):
        if reset is not None:
            reset()
        comm.Barrier()
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        if i >= warmup:
            times[i - warmup] = dt
        wrong += check(out)
    slowest = np.empty_like(times)
    comm.Allreduce(times, slowest, op=MPI.MAX)
    total_wrong = comm.allreduce(wrong, op=MPI.SUM)
    return statistics.median(slowest.tolist()), total_wrong
