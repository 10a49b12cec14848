"""Time the variants of one size (horo, and MPI's own collective with --baseline): per-iteration
times (barrier-aligned), the slowest rank's per iteration, median over iterations; every result
(warm-up included) checked against the reference.

The variants take turns iteration by iteration (horo, MPI, horo, MPI, ...) rather than one
block after the other: on a shared machine a job's speed drifts, and one block could fall
in a slow stretch that the other misses. Alternating, both see the same machine, and
their ratio is what it measures (np=2 here: separate blocks put a 64 KiB-1 MiB allreduce
at 0.86-4.7x MPI from job to job)."""
import statistics
import time

import numpy as np


class Variant:
    """fn() runs the collective and returns its output; check(output) -> wrong element count.
    reset() (optional, untimed) scribbles over a reused output buffer so a no-op cannot pass."""

    __slots__ = ("fn", "check", "reset")

    def __init__(self, fn, check, reset=None):
        self.fn, self.check, self.reset = fn, check, reset


def measure(comm, variants, iters, warmup, before_each=None):
    """variants: {name: Variant}. Returns {name: (median seconds of the slowest rank,
    total #wrong over all ranks and iterations)}. before_each() (optional, untimed) runs before
    every call of every variant (--fresh-inputs)."""
    from mpi4py import MPI

    times = {name: np.zeros(iters, dtype=np.float64) for name in variants}
    wrong = dict.fromkeys(variants, 0)
    for i in range(warmup + iters):
        for name, v in variants.items():
            if before_each is not None:
                before_each()
            if v.reset is not None:
                v.reset()
            comm.Barrier()
            t0 = time.perf_counter()
            out = v.fn()
            dt = time.perf_counter() - t0
            if i >= warmup:
                times[name][i - warmup] = dt
            wrong[name] += v.check(out)
            del out  # a new output (horo's) is freed before the next variant runs
    results = {}
    for name in variants:
        slowest = np.empty_like(times[name])
        comm.Allreduce(times[name], slowest, op=MPI.MAX)
        results[name] = (statistics.median(slowest.tolist()), comm.allreduce(wrong[name], op=MPI.SUM))
    return results
