"""Adasum against Sum, one allreduce of float32 at 1-64 MiB, in the same job.

    mpirun -np 2 python benchmarks/adasum_vs_sum.py [--iters 10]

Prints, per size, the median time of each op and the ratio Adasum / Sum. Adasum does
more work than a sum (dot products and norms each level, a small allreduce of them,
a pass in float64) and takes the pairwise tree rather than the transport's best
allreduce, so a ratio above 1 is expected; the question is by how much.
"""
import argparse
import time

import numpy as np

import horo


def median_seconds(array, op, name, iters):
    horo.allreduce(array, op=op, name=name)  # warm: negotiation, response cache, buffers
    times = []
    for _ in range(iters):
        horo.barrier()
        start = time.perf_counter()
        horo.allreduce(array, op=op, name=name)
        times.append(time.perf_counter() - start)
    # Every rank reports the slowest rank's time for each iteration.
    slowest = horo.allreduce(np.array(times), op=horo.Max, name=f"{name}.times")
    return float(np.median(slowest))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    args = parser.parse_args()
    horo.init()
    if horo.rank() == 0:
        print(f"# np={horo.size()}, float32, median of {args.iters} (slowest rank per iteration)")
        print(f"{'MiB':>5} {'Sum ms':>9} {'Adasum ms':>10} {'Adasum/Sum':>11}")
    rng = np.random.default_rng(horo.rank())
    for mib in args.sizes_mib:
        array = rng.standard_normal(mib * (1 << 20) // 4).astype(np.float32)
        sum_s = median_seconds(array, horo.Sum, f"bench.sum.{mib}", args.iters)
        adasum_s = median_seconds(array, horo.Adasum, f"bench.adasum.{mib}", args.iters)
        if horo.rank() == 0:
            print(f"{mib:>5} {sum_s * 1e3:>9.2f} {adasum_s * 1e3:>10.2f} {adasum_s / sum_s:>11.2f}", flush=True)
    horo.shutdown()


if __name__ == "__main__":
    main()
