"""`horo-bench model`: an α–β cost model of allreduce, fitted on this job's links.

    mpirun -np 6 -H h1:2,h2:2,h3:2 horo-bench model [--size 64M] [--plot model.png] [--json out.json]

A message of m bytes between two ranks takes t(m) = α + β·m. Rank 0 fits α and β by least
squares on ping-pong times (half the round trip) to a rank on its own host (intra) and to
a rank on another host (cross). Reducing m bytes into a buffer takes γ·m: every rank times
a float32 sum of two buffers (the reduction an allreduce runs per received chunk) while
the others do too, as they do inside a collective, and γ is the slowest rank's. With p
ranks, L per host, H = p/L hosts, and m bytes:

    ring (flat):          T = 2(p-1)·α + 2(p-1)/p · m · β + (p-1)/p · m · γ,
                          α = max(α_c, α_i), β = max(β_c, β_i)
        (each step is as slow as its slowest hop; each host's link carries 2(p-1)/p · m;
         each rank reduces (p-1) chunks of m/p)
    hierarchical:         T = 2(L-1)·α_i + 2(L-1)/L · m · β_i + (L-1)/L · m · γ
                            + 2(H-1)·α_c + 2(H-1)/H · m · β_c + (H-1)/H · m/L · γ
        (intra reduce-scatter + all-gather, then all L local ranks drive the link at once,
         each with m/L bytes, so the host's link carries 2(H-1)/H · m; the cross-host
         reduce-scatter reduces (H-1) chunks of m/(L·H))
    tree (recursive doubling): T = ⌈log2 p⌉ · (α + m · β + m · γ), with the same slowest-hop α, β

and bus bandwidth busbw = 2(p-1)/p · m / T (nccl-tests' convention). The tool prints the
fit, the measured busbw of horo's allreduce on this job next to the model's prediction for
it, and predicted busbw for 8..1024 ranks at 8 ranks/host over 10, 100 and 400 Gbit/s links
(β_c = 8 / rate; α_c as fitted), optionally plotted with matplotlib.
"""
import argparse
import json
import math
import socket
import statistics
import sys
import time

import numpy as np

RATES_GBIT = (10, 100, 400)
RANKS = (8, 16, 32, 64, 128, 256, 512, 1024)
PER_HOST = 8
PINGPONG_SIZES = [2**k for k in range(10, 25, 2)]  # 1 KiB .. 16 MiB


def fit_alpha_beta(sizes, times):
    """t = α + β·m, robust to a noisy (shared, oversubscribed) machine: β is the least-squares
    slope over the three largest messages, where bandwidth dominates; α the smallest
    remainder t - β·m over the rest. Returns (α seconds, β seconds/byte)."""
    m = np.asarray(sizes, float)
    t = np.asarray(times, float)
    order = np.argsort(m)
    big = order[-3:]
    beta = float(np.polyfit(m[big], t[big], 1)[0])
    if beta <= 0:  # noise swamped the slope: the largest message's time per byte bounds it
        beta = float(t[order[-1]] / m[order[-1]])
    alpha = float(np.min(t[order[:-3]] - beta * m[order[:-3]])) if len(m) > 3 else float(t[order[0]] - beta * m[order[0]])
    return max(alpha, 0.0), beta


def ring_time(p, m, a_c, b_c, g=0.0):
    return 2 * (p - 1) * a_c + 2 * (p - 1) / p * m * b_c + (p - 1) / p * m * g


def hierarchical_time(p, per_host, m, a_i, b_i, a_c, b_c, g=0.0):
    hosts = max(1, p // per_host)
    intra = (2 * (per_host - 1) * a_i + 2 * (per_host - 1) / per_host * m * b_i + (per_host - 1) / per_host * m * g
             if per_host > 1 else 0.0)
    cross = (2 * (hosts - 1) * a_c + 2 * (hosts - 1) / hosts * m * b_c + (hosts - 1) / hosts * m / per_host * g
             if hosts > 1 else 0.0)
    return intra + cross


def tree_time(p, m, a_c, b_c, g=0.0):
    return math.ceil(math.log2(p)) * (a_c + m * b_c + m * g)


def slowest_hop(a_c, b_c, a_i, b_i, per_host):
    """(α, β) of a flat algorithm's step, which crosses both kinds of hop when hosts hold several ranks."""
    if per_host < 2 or math.isnan(a_i) or math.isnan(b_i):
        return a_c, b_c
    return max(a_c, a_i), max(b_c, b_i)


def busbw(p, m, seconds):
    return 2 * (p - 1) / p * m / seconds if p > 1 else 0.0


def predictions(fit, m, ranks=RANKS, per_host=PER_HOST, rates=RATES_GBIT):
    """Rows of (rate Gbit/s, ranks, ring GB/s, hierarchical GB/s, tree GB/s)."""
    rows = []
    for rate in rates:
        b_c = 8 / (rate * 1e9)
        # a flat algorithm's step is as slow as its slowest hop: the link or the intra-host layer
        a_flat, b_flat = slowest_hop(fit["alpha_cross"], b_c, fit["alpha_intra"], fit["beta_intra"], per_host)
        g = fit.get("gamma", 0.0)
        for p in ranks:
            t_ring = ring_time(p, m, a_flat, b_flat, g)
            t_hier = hierarchical_time(p, per_host, m, fit["alpha_intra"], fit["beta_intra"], fit["alpha_cross"], b_c, g)
            t_tree = tree_time(p, m, a_flat, b_flat, g)
            rows.append((rate, p, *(busbw(p, m, t) / 1e9 for t in (t_ring, t_hier, t_tree))))
    return rows


# ------------------------------------------------------------------ measuring (under mpirun)


def _pingpong(comm, peer, nbytes, reps):
    """Half round trip (s), median over reps, between rank 0 and `peer`; others idle."""
    buf = np.zeros(nbytes, np.uint8)
    me = comm.Get_rank()
    times = []
    for _ in range(reps + 1):
        comm.Barrier()
        if me == 0:
            t = time.perf_counter()
            comm.Send(buf, dest=peer)
            comm.Recv(buf, source=peer)
            times.append((time.perf_counter() - t) / 2)
        elif me == peer:
            comm.Recv(buf, source=0)
            comm.Send(buf, dest=0)
    return statistics.median(times[1:]) if me == 0 else None


def measure_fit(comm, hosts_of, reps=5):
    """α, β intra-host (rank 0 and a rank on its host) and cross-host (rank 0 and one elsewhere)."""
    fit = {}
    mine = hosts_of[0]
    peers = {"intra": next((r for r, h in enumerate(hosts_of) if h == mine and r != 0), None),
             "cross": next((r for r, h in enumerate(hosts_of) if h != mine), None)}
    for kind, peer in peers.items():
        if peer is None:
            fit[f"alpha_{kind}"] = fit[f"beta_{kind}"] = float("nan")
            continue
        times = [_pingpong(comm, peer, n, reps) for n in PINGPONG_SIZES]
        if comm.Get_rank() == 0:
            fit[f"alpha_{kind}"], fit[f"beta_{kind}"] = fit_alpha_beta(PINGPONG_SIZES, times)
    return comm.bcast(fit, root=0)


def measure_gamma(comm, nbytes=16 << 20, reps=5):
    """γ (seconds per byte reduced): a float32 sum of two buffers, timed on every rank at once
    (ranks of a host share its cores and memory bandwidth, as inside a collective); the slowest."""
    a = np.ones(nbytes // 4, np.float32)
    b = np.ones_like(a)
    np.add(a, b, out=a)
    times = []
    for _ in range(reps):
        comm.Barrier()
        t = time.perf_counter()
        np.add(a, b, out=a)
        times.append(time.perf_counter() - t)
    from mpi4py import MPI

    return comm.allreduce(statistics.median(times), op=MPI.MAX) / nbytes


def measure_allreduce(horo, m, reps):
    """Median seconds of horo.allreduce of m bytes of float32 (slowest rank)."""
    from mpi4py import MPI

    x = np.ones(m // 4, np.float32)
    horo.allreduce(x, name="model.warmup")
    times = []
    for i in range(reps):
        MPI.COMM_WORLD.Barrier()
        t = time.perf_counter()
        horo.allreduce(x, name=f"model.{i % 2}")
        times.append(MPI.COMM_WORLD.allreduce(time.perf_counter() - t, op=MPI.MAX))
    return statistics.median(times)


def plot(fit, m, rows, measured, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(RATES_GBIT), figsize=(5 * len(RATES_GBIT), 4), sharey=False)
    for ax, rate in zip(axes, RATES_GBIT):
        mine = [r for r in rows if r[0] == rate]
        for col, label in ((2, "ring"), (3, "hierarchical"), (4, "tree")):
            ax.plot([r[1] for r in mine], [r[col] for r in mine], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{rate} Gbit/s links, {PER_HOST} ranks/host")
        ax.set_xlabel("ranks")
        ax.set_ylabel(f"predicted busbw (GB/s), {m >> 20} MiB allreduce")
        ax.grid(True, alpha=0.3)
        ax.legend()
    if measured:
        fig.suptitle(f"fit: α_intra {fit['alpha_intra'] * 1e6:.1f} µs, β_intra {1 / fit['beta_intra'] / 1e9:.2f} GB/s; "
                     f"α_cross {fit['alpha_cross'] * 1e6:.1f} µs, β_cross {1 / fit['beta_cross'] / 1e9:.3f} GB/s; "
                     f"measured here {measured['busbw'] / 1e9:.3f} GB/s vs predicted {measured['predicted'] / 1e9:.3f}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None):
    p = argparse.ArgumentParser(prog="horo-bench model", description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="64M", help="allreduce size for the measured point and predictions (default 64M)")
    p.add_argument("--reps", type=int, default=5, help="repetitions (medians) per measurement (default 5)")
    p.add_argument("--plot", metavar="PNG", help="draw predicted busbw vs ranks per link rate (needs matplotlib)")
    p.add_argument("--json", metavar="PATH", help="write fit, measured point and predictions as JSON (rank 0)")
    p.add_argument("--predict-alpha-us", type=float, default=None,
                   help="α (µs) for the predicted links instead of the fitted cross-host one: on an oversubscribed "
                        "machine (namespaced hosts) the fitted α is mostly CPU scheduling, not the network")
    args = p.parse_args(argv)
    from horo.bench.sizes import parse_size

    m = parse_size(args.size)
    from mpi4py import MPI

    import horo

    comm = MPI.COMM_WORLD
    hosts_of = comm.allgather(socket.gethostname())
    fit = measure_fit(comm, hosts_of, args.reps)  # before horo starts its thread: the links alone
    fit["gamma"] = measure_gamma(comm, reps=args.reps)
    horo.init()
    n, per_host, hosts = horo.size(), horo.local_size(), horo.cross_size()
    seconds = measure_allreduce(horo, m, args.reps)
    from horo import _core

    hierarchical = "hierarchical" in _core.transport() and hosts > 1
    g = fit["gamma"]
    if hosts > 1:
        predicted_t = (hierarchical_time(n, per_host, m, fit["alpha_intra"], fit["beta_intra"], fit["alpha_cross"],
                                         fit["beta_cross"], g) if hierarchical
                       else ring_time(n, m, *slowest_hop(fit["alpha_cross"], fit["beta_cross"], fit["alpha_intra"],
                                                          fit["beta_intra"], per_host), g))
    else:
        predicted_t = ring_time(n, m, fit["alpha_intra"], fit["beta_intra"], g)
    measured = {"ranks": n, "hosts": hosts, "per_host": per_host, "algorithm": "hierarchical" if hierarchical else "ring",
                "seconds": seconds, "busbw": busbw(n, m, seconds), "predicted": busbw(n, m, predicted_t)}
    if horo.rank() == 0:
        predict_fit = dict(fit)
        if args.predict_alpha_us is not None:
            predict_fit["alpha_cross"] = args.predict_alpha_us * 1e-6
        rows = predictions(predict_fit, m)
        print(f"# α–β fit (ping-pong, rank 0): intra α {fit['alpha_intra'] * 1e6:.1f} µs, "
              f"1/β {1 / fit['beta_intra'] / 1e9:.3f} GB/s; cross α {fit['alpha_cross'] * 1e6:.1f} µs, "
              f"1/β {1 / fit['beta_cross'] / 1e9:.3f} GB/s; reduce 1/γ {1 / fit['gamma'] / 1e9:.2f} GB/s")
        print(f"# measured on this job: {n} ranks = {hosts} hosts x {per_host}, {measured['algorithm']} allreduce of "
              f"{m} B: busbw {measured['busbw'] / 1e9:.3f} GB/s, model {measured['predicted'] / 1e9:.3f} GB/s "
              f"(measured/model {measured['busbw'] / measured['predicted']:.2f})")
        print(f"# predicted busbw (GB/s), {m} B allreduce, {PER_HOST} ranks/host, "
              f"α_cross {predict_fit['alpha_cross'] * 1e6:.1f} µs")
        print(f"{'link':>9} {'ranks':>6} {'ring':>8} {'hier':>8} {'tree':>8}")
        for rate, ranks, ring, hier, tree in rows:
            print(f"{rate:>6}Gb/s {ranks:>6} {ring:>8.2f} {hier:>8.2f} {tree:>8.2f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"size": m, "fit": fit, "measured": measured, "predicted": rows}, f, indent=1)
        if args.plot:
            plot(fit, m, rows, measured, args.plot)
            print(f"# plot: {args.plot}")
    horo.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
