"""Across hosts on the namespaced cluster (scripts/cluster.sh): 64 MiB float32 allreduce,
horo hierarchical vs horo flat ring vs MPI_Allreduce (mpi4py) on the same ranks, and the
α–β model (`horo-bench model`) against measurements at 2, 3 and 4 hosts.

    python benchmarks/multihost_allreduce.py [--hosts 3] [--per-host 2] [--rate 1gbit] [--reps 5]
    python benchmarks/multihost_allreduce.py --model-hosts 2,3,4

Needs root (it brings the cluster up as `horob` and takes it down again). One launch times
all three variants interleaved rep by rep (horo is shut down and started again between its
two settings, which are read at init), and reports medians of the slowest rank's time.
Cross-host link use: bytes each host's link carries per allreduce (ring: 2(p-1)/p·m;
hierarchical: 2(H-1)/H·m) over the time, against the shaped rate.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLUSTER = REPO / "scripts" / "cluster.sh"
NAME = "horob"
MiB = 1 << 20


def worker(size, reps):
    import numpy as np
    from mpi4py import MPI

    import horo

    world = MPI.COMM_WORLD
    x = np.ones(size // 4, np.float32)
    settings = {"hierarchical": {"HORO_HIERARCHICAL_ALLREDUCE": "1"},
                "flat ring": {"HORO_HIERARCHICAL_ALLREDUCE": "0", "HORO_ALLREDUCE_ALGO": "ring"}}
    times = {k: [] for k in [*settings, "MPI_Allreduce"]}
    for rep in range(reps + 1):  # the first rep warms up
        for variant, env in settings.items():
            os.environ.update(env)
            horo.init()
            out = horo.allreduce(x, op=horo.Sum, name="w")
            assert out[0] == world.size
            world.Barrier()
            t = time.perf_counter()
            horo.allreduce(x, op=horo.Sum, name="t")
            times[variant].append(world.allreduce(time.perf_counter() - t, op=MPI.MAX))
            horo.shutdown()
        y = np.empty_like(x)
        world.Barrier()
        t = time.perf_counter()
        world.Allreduce(x, y)
        times["MPI_Allreduce"].append(world.allreduce(time.perf_counter() - t, op=MPI.MAX))
    if world.rank == 0:
        print("RESULT " + json.dumps({k: statistics.median(v[1:]) for k, v in times.items()}), flush=True)


def cluster(*args):
    return subprocess.run(["bash", str(CLUSTER), *args, "--name", NAME], capture_output=True, text=True, check=True)


def cluster_env(hosts, rate):
    out = cluster("up", str(hosts), "--rate", rate).stdout
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_mpi_yield_when_idle="1", PYTHONPATH=str(REPO))
    for line in out.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    return env


def mpirun(env, hosts, per_host, argv, timeout=900):
    cmd = [str(Path(sys.executable).parent / "mpirun"), "-np", str(hosts * per_host),
           "--host", ",".join(f"h{i}:{per_host}" for i in range(1, hosts + 1)), "-x", "PYTHONPATH", *argv]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, errors="replace")
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def rate_bytes_per_s(rate):
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    for unit, scale in units.items():
        if rate.lower().endswith(unit):
            return float(rate[: -len(unit)]) * scale / 8
    raise SystemExit(f"--rate {rate}: use e.g. 1gbit or 500mbit")


def compare(args):
    env = cluster_env(args.hosts, args.rate)
    try:
        out = mpirun(env, args.hosts, args.per_host, [sys.executable, __file__, "--worker", "--size", str(args.size),
                                                        "--reps", str(args.reps)])
    finally:
        cluster("down")
    result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    p, m, hosts = args.hosts * args.per_host, args.size, args.hosts
    link = rate_bytes_per_s(args.rate)
    per_link = {"hierarchical": 2 * (hosts - 1) / hosts * m, "flat ring": 2 * (p - 1) / p * m,
                "MPI_Allreduce": None}
    print(f"# {hosts} hosts x {args.per_host} ranks, links {args.rate}, {m // MiB} MiB float32 allreduce, "
          f"median of {args.reps} (load: {os.getloadavg()[0]:.1f})")
    print(f"{'variant':<15} {'time s':>8} {'busbw GB/s':>11} {'vs flat':>8} {'vs MPI':>7} {'link use':>9}")
    for variant, seconds in result.items():
        bus = 2 * (p - 1) / p * m / seconds
        use = f"{per_link[variant] / seconds / link:.0%}" if per_link[variant] else "-"
        print(f"{variant:<15} {seconds:>8.3f} {bus / 1e9:>11.3f} {result['flat ring'] / seconds:>8.2f} "
              f"{result['MPI_Allreduce'] / seconds:>7.2f} {use:>9}")


def model(args):
    rows = []
    for hosts in args.model_hosts:
        env = cluster_env(hosts, args.rate)
        try:
            path = f"/tmp/horo-model-{hosts}.json"
            argv = [str(Path(sys.executable).parent / "horo-bench"), "model", "--json", path, "--reps", str(args.reps)]
            if args.plot and hosts == args.model_hosts[-1]:
                argv += ["--plot", args.plot]
            mpirun(env, hosts, args.per_host, argv)
            rows.append(json.load(open(path)))
        finally:
            cluster("down")
    print(f"# model vs measured, {args.per_host} ranks/host, links {args.rate} (load: {os.getloadavg()[0]:.1f})")
    print(f"{'hosts':>5} {'ranks':>5} {'algorithm':<13} {'measured GB/s':>14} {'model GB/s':>11} {'meas/model':>10}"
          f" {'a_cross us':>10} {'1/b_cross GB/s':>14}")
    for r in rows:
        me, fit = r["measured"], r["fit"]
        print(f"{me['hosts']:>5} {me['ranks']:>5} {me['algorithm']:<13} {me['busbw'] / 1e9:>14.3f} "
              f"{me['predicted'] / 1e9:>11.3f} {me['busbw'] / me['predicted']:>10.2f} "
              f"{fit['alpha_cross'] * 1e6:>10.0f} {1 / fit['beta_cross'] / 1e9:>14.3f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=3)
    p.add_argument("--per-host", type=int, default=2)
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--size", type=int, default=64 * MiB)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--model-hosts", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help="instead: horo-bench model at each host count, model vs measured")
    p.add_argument("--plot", help="with --model-hosts: the model's plot (largest host count)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args.size, args.reps)
    return model(args) if args.model_hosts else compare(args)


if __name__ == "__main__":
    main()
