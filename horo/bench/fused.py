"""horo-bench fused: one training step's gradient allreduce, tensor fusion on vs off, in one run.

    mpirun -np 2 horo-bench fused [--model module:attr] [--steps 5] [--reps 5] [--baseline]

One step = every gradient of the model (ResNet-50's 161 shapes unless --model names a torch model)
enqueued with allreduce_async_ (float32 Sum, in place, fixed names, last layer first as backward
produces them), then every handle synchronised. Variants, interleaved rep by rep in rotating order:
  fused     HORO_FUSION_THRESHOLD as set (default the core's, 64 MiB);
  unfused   HORO_FUSION_THRESHOLD=0: one collective per tensor;
  mpi4py    (--baseline) comm.Allreduce(IN_PLACE, g) per tensor in turn.
The core reads HORO_FUSION_THRESHOLD at init, so horo is re-initialised for each block (never timed).
Rank 0 prints the median over reps of the slowest rank's time per step, and time / fused.
Every variant is checked against NumPy once before timing; the exit status is 1 on a wrong result.
"""
import argparse
import math
import os
import statistics
import sys
import time

import numpy as np

from horo.bench import models

THRESHOLD_ENV = "HORO_FUSION_THRESHOLD"


def build_parser():
    p = argparse.ArgumentParser(prog="horo-bench fused", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 2)[2])
    p.add_argument("--model", metavar="MODULE:ATTR", default=None,
                   help="a torch model (nn.Module, or a class/factory called with no arguments) whose parameter "
                        "shapes are the gradients (default: ResNet-50's, built in)")
    p.add_argument("--steps", type=int, default=5, help="steps per timed block (default 5)")
    p.add_argument("--reps", type=int, default=5, help="timed blocks per variant; the median is reported (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps after each (re-)init (default 2)")
    p.add_argument("--fusion-threshold-mb", type=float, default=None,
                   help="the fused variant's threshold in MiB (default: HORO_FUSION_THRESHOLD, else the core's)")
    p.add_argument("--baseline", action="store_true", help="also time an mpi4py loop of per-tensor Allreduce")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON (rank 0)")
    return p


def parse_args(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    if args.steps < 1 or args.reps < 1 or args.warmup < 0:
        p.error("--steps and --reps must be >= 1, --warmup >= 0")
    try:
        args.shapes = models.shapes_of(args.model) if args.model else list(models.RESNET50_SHAPES)
    except (ImportError, AttributeError, TypeError, ValueError) as e:
        p.error(f"--model {args.model}: {e}")
    args.label = args.model or "resnet50"
    return args


def _default_threshold():
    import horo

    env = os.environ.get(THRESHOLD_ENV) or os.environ.get("HOROVOD_FUSION_THRESHOLD")
    if env:
        return int(float(env))
    return int(next(row["default"] for row in horo.tunables() if row["env"] == THRESHOLD_ENV))


def main(argv=None):
    args = parse_args(argv)
    from mpi4py import MPI

    import horo

    comm = MPI.COMM_WORLD.Dup()
    rank, n = comm.Get_rank(), comm.Get_size()
    threshold = (round(args.fusion_threshold_mb * 1024 * 1024) if args.fusion_threshold_mb is not None
                 else _default_threshold())
    grads, horo_step, mpi_step = models.gradient_steps(args.shapes, "horo_bench.fused", horo, comm)
    elements = sum(math.prod(s) for s in args.shapes)
    nbytes = elements * 4

    variants = {"fused": threshold, "unfused": 0}
    if args.baseline:
        variants["mpi4py loop"] = None

    def say(*a):
        if rank == 0:
            print(*a, flush=True)

    def run_block(name, steps, verify=False):
        """Seconds per step of `steps` steps (slowest rank), and #wrong when verifying."""
        setting = variants[name]
        if setting is not None:
            os.environ[THRESHOLD_ENV] = str(setting)
            horo.init(comm=MPI.COMM_WORLD)
        step = horo_step if setting is not None else mpi_step
        try:
            wrong = 0
            if verify:  # integer-valued data: exact float32 sums
                for i, g in enumerate(grads):
                    g[...] = (np.arange(g.size, dtype=np.float32) % 13 + i % 5 + rank).reshape(g.shape)
                step()
                for i, g in enumerate(grads):
                    want = (np.arange(g.size, dtype=np.float32) % 13 + i % 5) * n + n * (n - 1) / 2
                    wrong += int(np.count_nonzero(g.ravel() != want))
                    g.fill(0)  # timing runs on zeros: in-place sums of anything else grow every step
            for _ in range(args.warmup):
                step()
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            dt = time.perf_counter() - t0
        finally:
            if setting is not None:
                horo.shutdown()
        return comm.allreduce(dt, op=MPI.MAX) / steps, comm.allreduce(wrong, op=MPI.SUM)

    say(f"# horo-bench fused: {args.label} gradients, {len(grads)} float32 tensors, {elements:,} elements "
        f"({nbytes / 2**20:.1f} MiB), {n} ranks")
    say(f"# fused: {THRESHOLD_ENV}={threshold} ({threshold / 2**20:g} MiB); unfused: {THRESHOLD_ENV}=0; "
        f"{args.reps} reps x {args.steps} steps, horo re-initialised per block")
    saved = os.environ.get(THRESHOLD_ENV)
    wrong = {name: run_block(name, 1, verify=True)[1] for name in variants}
    samples = {name: [] for name in variants}
    names_list = list(variants)
    for r in range(args.reps):
        k = r % len(names_list)
        for name in names_list[k:] + names_list[:k]:
            samples[name].append(run_block(name, args.steps)[0])
    if saved is None:
        os.environ.pop(THRESHOLD_ENV, None)
    else:
        os.environ[THRESHOLD_ENV] = saved

    med = {name: statistics.median(ts) for name, ts in samples.items()}
    records = [{"variant": name, "fusion_threshold": variants[name], "ms_per_step": med[name] * 1e3,
                "algbw_GBps": nbytes / med[name] / 1e9, "time_over_fused": med[name] / med["fused"],
                "samples_s": samples[name], "wrong": wrong[name]} for name in variants]
    say(f"#{'variant':>14} {'ms/step':>10} {'algbw GB/s':>11} {'time/fused':>11} {'#wrong':>7}")
    for rec in records:
        say(f" {rec['variant']:>14} {rec['ms_per_step']:>10.2f} {rec['algbw_GBps']:>11.3f} "
            f"{rec['time_over_fused']:>11.2f} {rec['wrong']:>7d}")
    total_wrong = sum(wrong.values())
    say(f"# time/fused > 1: slower than fused. wrong elements: {total_wrong} {'OK' if total_wrong == 0 else 'FAILED'}")
    if rank == 0 and args.json:
        import json

        with open(args.json, "w") as f:
            json.dump({"model": args.label, "tensors": len(grads), "elements": elements, "nranks": n,
                       "steps": args.steps, "reps": args.reps, "results": records}, f, indent=2)
            f.write("\n")
        print(f"# wrote {args.json}")
    comm.Free()
    return 1 if total_wrong else 0


if __name__ == "__main__":
    sys.exit(main())
