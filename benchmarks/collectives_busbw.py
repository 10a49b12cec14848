"""Broadcast, allgather, alltoall and reducescatter bandwidth: horo vs mpi4py, one run, interleaved.

    mpirun -np 2 python benchmarks/collectives_busbw.py [--quick] [--json out.json]
        [--collectives broadcast,allgather,alltoall,reducescatter] [--sizes 1KiB,1MiB,...]
        [--algo auto|ring|mpi] [--algos ring,mpi | --algos none]

float32, fixed tensor names per collective and size (horo's response cache is exercised). Baselines:
  broadcast      horo.broadcast_(buf, 0)           vs comm.Bcast(buf, root=0)             (in place, both)
  allgather      horo.allgather(x)                  vs comm.Allgatherv(x, [out, counts, displs])
  alltoall       horo.alltoall(x)  (even splits)    vs comm.Alltoallv([x, ...], [out, ...])
  reducescatter  horo.reducescatter(x, op=Sum)      vs comm.Reduce_scatter(x, out, counts, SUM)

Sizes and bus bandwidth follow nccl-tests: "size" is the buffer for broadcast, the total OUTPUT of
allgather (each rank contributes size/n), the INPUT of reducescatter (each rank keeps size/n) and
each rank's input of alltoall; busbw = size/t * factor, factor 1 for broadcast, (n-1)/n otherwise.
t = median over --reps blocks of the slowest rank's per-call time. Target (issue): horo/mpi >= 0.9x
from 1 MiB; the small-message latency ratio (horo/mpi time at the smallest size, 1 KiB) is reported too.

horo's allgather and reducescatter are also timed with HORO_ALLGATHER_ALGO / HORO_REDUCESCATTER_ALGO
= ring and = mpi (--algos; horo reads them at init(), so it is shut down and re-initialised with the
other setting before such a block; init is never timed), interleaved with the rest: the "ring/mpi"
column says where horo's ring beats MPI's native collective. --algo sets both variables for the
plain "horo" variant (default: the environment's, i.e. auto unless set).

Every variant's result is checked against NumPy before timing (fresh, rank-specific data) and its
last timed result after (integer-valued float32, so sums are exact): a wrong result exits 1.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

COLLECTIVES = ("broadcast", "allgather", "alltoall", "reducescatter")
ALGO_COLLECTIVES = ("allgather", "reducescatter")  # the ones with a ring / mpi choice inside horo
ALGO_ENVS = ("HORO_ALLGATHER_ALGO", "HORO_REDUCESCATTER_ALGO")
DEFAULT_SIZES = ",".join(f"{4 ** k}b" for k in range(5, 14))  # 1 KiB .. 64 MiB, x4
QUICK_SIZES = ",".join(f"{4 ** k}b" for k in (5, 7, 9, 10, 11, 13))  # 1, 16, 256 KiB, 1, 4, 64 MiB
TARGET = 0.9  # horo/mpi bandwidth from 1 MiB (issue 3)
ROOT = 0


def busbw_factor(coll, n):
    return 1.0 if coll == "broadcast" or n < 2 else (n - 1) / n


# --------------------------------------------------------------------------- one collective at one size


class Case:
    """Buffers, calls and expected results of one collective at one size (on this rank)."""

    def __init__(self, coll, nbytes, rank, n, comm, horo):
        from mpi4py import MPI

        self.coll, self.rank, self.n, self.comm = coll, rank, n, comm
        total = nbytes // 4
        if coll != "broadcast":  # per-rank blocks: round down to a multiple of n elements
            total = max(n, total // n * n)
        self.nelem = total  # elements in "size" (nccl-tests' size, see the docstring)
        self.nbytes = total * 4
        m = total // n  # per-rank block
        self.m = m
        counts, displs = [m] * n, [i * m for i in range(n)]
        pat = np.resize(np.arange(C.PATTERN, dtype=np.float32), total)
        f32 = MPI.FLOAT
        self.holder = {}

        if coll == "broadcast":
            self.want = pat.copy()  # root's data (pattern_input(total, ROOT) with ROOT = 0)
            self.fresh = lambda: C.pattern_input(total, rank)
            self.mpi_buf = self.fresh()
            self.horo_bufs = {}

            def mpi_call():
                comm.Bcast(self.mpi_buf, root=ROOT)

            self.mpi_call = mpi_call
            self.mpi_result = lambda: self.mpi_buf
        elif coll == "allgather":
            self.x = C.pattern_input(m, rank)
            self.want = np.concatenate([C.pattern_input(m, r) for r in range(n)])
            self.mpi_out = np.empty(total, np.float32)
            self.mpi_call = lambda: comm.Allgatherv(self.x, [self.mpi_out, counts, displs, f32])
            self.mpi_result = lambda: self.mpi_out
        elif coll == "alltoall":
            # block j of rank r (sent to rank j) = pat[j*m:(j+1)*m] + 1000 r: sender and position both show
            self.x = pat + 1000.0 * rank
            self.want = np.concatenate([pat[rank * m:(rank + 1) * m] + 1000.0 * r for r in range(n)])
            self.mpi_out = np.empty(total, np.float32)
            self.mpi_call = lambda: comm.Alltoallv([self.x, counts, displs, f32], [self.mpi_out, counts, displs, f32])
            self.mpi_result = lambda: self.mpi_out
        elif coll == "reducescatter":
            self.x = C.pattern_input(total, rank)
            self.want = C.pattern_sum(total, n)[rank * m:(rank + 1) * m]
            self.mpi_out = np.empty(m, np.float32)
            self.mpi_call = lambda: comm.Reduce_scatter(self.x, self.mpi_out, recvcounts=counts, op=MPI.SUM)
            self.mpi_result = lambda: self.mpi_out
        else:
            raise ValueError(coll)
        self.horo = horo

    def horo_fn(self, key):
        """The call of horo variant `key` ('horo', 'horo[ring]', ...): fixed name per collective, size, variant."""
        horo, coll, holder = self.horo, self.coll, self.holder
        name = f"cbw.{coll}.{self.nbytes}.{key}"
        if coll == "broadcast":
            buf = self.horo_bufs.setdefault(key, self.fresh())

            def call():
                horo.broadcast_(buf, ROOT, name=name)
                holder[key] = buf
        elif coll == "allgather":
            def call():
                holder[key] = horo.allgather(self.x, name=name)
        elif coll == "alltoall":
            def call():
                holder[key] = horo.alltoall(self.x, name=name)
        else:
            def call():
                holder[key] = horo.reducescatter(self.x, op=horo.Sum, name=name)
        return call

    def check_fresh(self, key):
        """One call on fresh, rank-specific data (broadcast: a new buffer); True if right on this rank."""
        horo = self.horo
        name = f"cbw.check.{self.coll}.{self.nbytes}"
        if self.coll == "broadcast":
            if key == "mpi4py":
                buf = self.fresh()
                self.comm.Bcast(buf, root=ROOT)
            else:
                buf = self.fresh()
                ret = horo.broadcast_(buf, ROOT, name=name)
                if not (ret is buf or np.shares_memory(ret, buf)):
                    return False
            return np.array_equal(buf, self.want)
        if key == "mpi4py":
            self.mpi_call()
            out = self.mpi_result()
        elif self.coll == "allgather":
            out = horo.allgather(self.x, name=name)
        elif self.coll == "alltoall":
            out = horo.alltoall(self.x, name=name)
        else:
            out = horo.reducescatter(self.x, op=horo.Sum, name=name)
        return out.dtype == np.float32 and out.shape == self.want.shape and np.array_equal(out, self.want)

    def check_last(self, key):
        """The result the variant's last timed call left, on this rank."""
        out = self.mpi_result() if key == "mpi4py" else self.holder.get(key)
        return out is not None and out.shape == self.want.shape and np.array_equal(out, self.want)


# --------------------------------------------------------------------------- horo (re-)initialisation per algorithm


class HoroRunner:
    """Keeps horo initialised with the algorithm a variant needs; re-initialises (untimed) on a change."""

    def __init__(self, ctx, base_algo):
        self.ctx, self.horo = ctx, ctx.horo
        self.base = base_algo  # what setup() initialised with (None: the environment's own)
        self.current = "base"
        self.saved = {k: os.environ.get(k) for k in ALGO_ENVS}
        self.settle = np.zeros(1, np.float32)
        self.reinits = 0

    def use(self, algo):
        """algo: 'base' (the plain horo variant) or 'ring' / 'mpi'."""
        if algo == self.current:
            return
        from mpi4py import MPI

        self.horo.shutdown()
        for k in ALGO_ENVS:
            v = self.saved[k] if algo == "base" else algo
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self.horo.init(comm=MPI.COMM_WORLD)
        # the first calls after init() are slow (thread start-up, negotiation): settle on a tiny tensor
        for _ in range(5):
            self.horo.allreduce(self.settle, name="cbw.settle", op=self.horo.Sum)
        self.current = algo
        self.reinits += 1


def variant_algo(key):
    return key[len("horo["):-1] if key.startswith("horo[") else "base"


def measure(ctx, runner, case, keys, args):
    """Per rep, in rotating order, one block per variant; returns (samples, iters)."""
    comm = ctx.comm
    fns = {k: (case.mpi_call if k == "mpi4py" else case.horo_fn(k)) for k in keys}

    def prepare(k, calls):
        if k != "mpi4py":
            runner.use(variant_algo(k))
        for _ in range(calls):
            fns[k]()

    # calls per block: calibrated on the variants that need no re-init, shared by all
    plain = [k for k in keys if variant_algo(k) == "base"]
    for k in plain:
        prepare(k, max(1, args.warmup))
    # On a loaded machine one descheduled rank during calibration makes the blocks far too short (1 call where
    # 500 fit): calibrate twice and keep the longer block (the result is identical on every rank).
    iters = args.iters or max(C.calibrate_iters(comm, [fns[k] for k in plain], args.target_s) for _ in range(2))
    samples = {k: [] for k in keys}
    for r in range(args.reps):
        j = r % len(keys)
        for k in keys[j:] + keys[:j]:
            # a variant that needs horo re-initialised warms up again (first call negotiates, then the cache)
            need = k != "mpi4py" and variant_algo(k) != runner.current
            prepare(k, max(1, min(args.warmup, iters)) if need else min(1, iters))
            samples[k].append(C.time_block(comm, fns[k], iters))
    return samples, iters


# --------------------------------------------------------------------------- main


def main():
    p = C.base_parser(__doc__.splitlines()[0], reps=5, warmup=2, target_s=0.2, quick_reps=5, quick_warmup=1)
    p.add_argument("--sizes", default=None,
                   help="sizes (suffix b/KiB/MiB; bare numbers MiB); default 1 KiB..64 MiB x4, quick 1,16,256 KiB,1,4,64 MiB")
    p.add_argument("--collectives", default=",".join(COLLECTIVES), help=f"comma list out of {','.join(COLLECTIVES)}")
    p.add_argument("--algo", choices=("auto", "ring", "mpi"), default=None,
                   help="HORO_ALLGATHER_ALGO and HORO_REDUCESCATTER_ALGO for the plain horo variant, set before "
                        "horo.init() (default: the environment's)")
    p.add_argument("--algos", default="ring,mpi",
                   help="extra horo variants for allgather/reducescatter, each re-initialised with that algorithm "
                        "(default ring,mpi; 'none' for none)")
    args = C.finish_args(p.parse_args())
    sizes = C.parse_sizes(args.sizes or (QUICK_SIZES if args.quick else DEFAULT_SIZES))
    colls = [c.strip() for c in args.collectives.split(",") if c.strip()]
    bad = [c for c in colls if c not in COLLECTIVES]
    if bad:
        p.error(f"unknown collective(s) {bad}; choose from {COLLECTIVES}")
    algos = [] if args.algos.strip().lower() in ("", "none") else [a.strip() for a in args.algos.split(",") if a.strip()]
    if any(a not in ("auto", "ring", "mpi") for a in algos):
        p.error("--algos takes ring, mpi and/or auto")
    if args.algo:
        for k in ALGO_ENVS:
            os.environ[k] = args.algo  # before setup() -> horo.init()

    ctx = C.setup(args)
    horo, comm, n = ctx.horo, ctx.comm, ctx.size
    if horo is not None:
        import horo as _h

        ctx.log(f"horo from {os.path.dirname(_h.__file__)}")
    C.header(ctx, "collectives bus bandwidth, float32 (broadcast/allgather/alltoall/reducescatter)")
    if n < 2:
        ctx.log("note: np=1 has no communication; run under mpirun -np 2 or more.")
    runner = HoroRunner(ctx, args.algo) if horo is not None else None

    # The first collective of a process came out slow (allocator, first paths): one untimed pass over all of them.
    for coll in colls:
        case = Case(coll, sizes[0], ctx.rank, n, comm, horo)
        keys = (["horo"] if horo is not None else []) + ["mpi4py"]
        for k in keys:
            for _ in range(3):
                (case.mpi_call if k == "mpi4py" else case.horo_fn(k))()
        del case

    results = {c: [] for c in colls}
    for coll in colls:
        keys = ["mpi4py"]
        if horo is not None:
            keys = ["horo"] + ([f"horo[{a}]" for a in algos] if coll in ALGO_COLLECTIVES else []) + keys
        ctx.log(f"-- {coll}")
        for nbytes in sizes:
            case = Case(coll, nbytes, ctx.rank, n, comm, horo)
            # --- correctness before timing: fresh data, every variant (horo with each algorithm)
            for k in keys:
                if k != "mpi4py":
                    runner.use(variant_algo(k))
                if not C.all_ok(comm, case.check_fresh(k)):
                    C.fail(ctx, f"{k} {coll} of {C.fmt_bytes(case.nbytes)} float32 differs from NumPy on some rank")
            samples, iters = measure(ctx, runner, case, keys, args)
            for k in keys:  # --- and the last timed result of every variant
                if not C.all_ok(comm, case.check_last(k)):
                    C.fail(ctx, f"{k} {coll} of {C.fmt_bytes(case.nbytes)} float32 gave a wrong result during timing")
            f = busbw_factor(coll, n)
            row = {"bytes": case.nbytes, "per_rank_bytes": case.m * 4, "iters": iters, "checked": True}
            for k, ts in samples.items():
                med = C.median(ts)
                row[k] = {"median_s": med, "samples_s": ts, "algbw_gbs": case.nbytes / med / 1e9,
                          "busbw_gbs": case.nbytes / med * f / 1e9, "spread_pct": C.spread(ts)}
            if horo is not None:
                row["ratio_horo_vs_mpi"] = row["mpi4py"]["median_s"] / row["horo"]["median_s"]
                row["paired_ratio_horo_vs_mpi"] = C.paired_ratio(samples["mpi4py"], samples["horo"])
                if "horo[ring]" in row and "horo[mpi]" in row:
                    row["ring_speedup_vs_mpi_algo"] = row["horo[mpi]"]["median_s"] / row["horo[ring]"]["median_s"]
                    row["paired_ring_speedup"] = C.paired_ratio(samples["horo[mpi]"], samples["horo[ring]"])
            results[coll].append(row)
            ctx.log(f"  {C.fmt_bytes(case.nbytes):>8}: " + "  ".join(
                f"{k} {row[k]['busbw_gbs']:.3f} GB/s" for k in keys) + f"  ({iters} calls/block, checked)")
            del case
        if runner is not None:
            runner.use("base")

    summary = report(ctx, results, colls, n, args) if ctx.rank == 0 else None
    meta = C.meta(ctx, "collectives_busbw")
    meta.update({"collectives": colls, "algos": algos, "algo": args.algo,
                 "horo_reinits": runner.reinits if runner else 0})
    try:
        meta["loadavg_at_end"] = os.getloadavg()
    except OSError:
        pass
    C.write_json(ctx, args.json, {"meta": meta, "results": results, "summary": summary})
    ctx.finalize()


# --------------------------------------------------------------------------- report (rank 0)


def report(ctx, results, colls, n, args):
    horo_on = ctx.horo is not None
    summary = {}
    for coll in colls:
        rows_in = results[coll]
        has_algos = horo_on and rows_in and "horo[ring]" in rows_in[0] and "horo[mpi]" in rows_in[0]
        cols = ["size", "calls/blk"]
        if horo_on:
            cols += ["horo GB/s"]
        cols += ["MPI GB/s"]
        if horo_on:
            cols += ["horo/MPI", "paired", "target", "met"]
        if has_algos:
            cols += ["ring GB/s", "mpi-algo GB/s", "ring/mpi-algo"]
        cols += ["noise %"]
        rows, targets, ring_wins = [], [], []
        for r in rows_in:
            line = [C.fmt_bytes(r["bytes"]), str(r["iters"])]
            if horo_on:
                line.append(f"{r['horo']['busbw_gbs']:.3f}")
            line.append(f"{r['mpi4py']['busbw_gbs']:.3f}")
            if horo_on:
                ratio = r["ratio_horo_vs_mpi"]
                tgt = TARGET if r["bytes"] >= C.MiB else None
                met = None if tgt is None else ratio >= tgt
                if tgt is not None:
                    targets.append({"bytes": r["bytes"], "ratio": ratio, "met": met})
                line += [C.fmt_ratio(ratio), C.fmt_ratio(r["paired_ratio_horo_vs_mpi"]),
                         "-" if tgt is None else f">={tgt:.1f}x", "-" if met is None else C.verdict(met)]
            if has_algos:
                sp = r["ring_speedup_vs_mpi_algo"]
                if sp > 1.0 and r["paired_ring_speedup"] > 1.0:  # both the medians' and the per-rep ratio
                    ring_wins.append(r["bytes"])
                line += [f"{r['horo[ring]']['busbw_gbs']:.3f}", f"{r['horo[mpi]']['busbw_gbs']:.3f}",
                         f"{C.fmt_ratio(sp)} ({C.fmt_ratio(r['paired_ring_speedup'])})"]
            noise = max(v["spread_pct"] for k, v in r.items() if isinstance(v, dict) and "spread_pct" in v)
            line.append(f"{noise:.0f}")
            rows.append(line)
        f = busbw_factor(coll, n)
        size_def = {"broadcast": "the buffer", "allgather": "the total output (each rank sends size/n)",
                    "alltoall": "each rank's input (size/n to each rank)",
                    "reducescatter": "the input (each rank keeps size/n)"}[coll]
        mpi_name = {"broadcast": "comm.Bcast", "allgather": "comm.Allgatherv", "alltoall": "comm.Alltoallv",
                    "reducescatter": "comm.Reduce_scatter(SUM)"}[coll]
        notes = [f"size = {size_def}; busbw = size/t * {'1' if f == 1.0 else f'(n-1)/n = {f:.3f}'}, n={n}; "
                 f"MPI = mpi4py {mpi_name}; t = median of {args.reps} reps (slowest rank's per-call time)."]
        entry = {"targets": targets}
        if horo_on and rows_in and rows_in[0]["bytes"] <= 64 * C.KiB:  # latency: the smallest size, if small
            first = rows_in[0]
            lat = first["horo"]["median_s"] / first["mpi4py"]["median_s"]
            entry["latency"] = {"bytes": first["bytes"], "horo_us": first["horo"]["median_s"] * 1e6,
                                "mpi_us": first["mpi4py"]["median_s"] * 1e6, "horo_over_mpi": lat}
            notes.append(f"small-message latency at {C.fmt_bytes(first['bytes'])}: horo {first['horo']['median_s'] * 1e6:,.1f} us, "
                         f"MPI {first['mpi4py']['median_s'] * 1e6:,.1f} us -> horo/MPI time = {lat:.2f}x")
        if horo_on and rows_in:
            met_all = all(t["met"] for t in targets) if targets else None
            notes.append(f"horo/MPI = MPI time / horo time (busbw ratio); paired = median of the per-rep ratios; "
                         f"target >= {TARGET}x from 1 MiB: {'n/a' if met_all is None else C.verdict(met_all)}")
            entry["target_met"] = met_all
        if has_algos:
            entry["ring_wins_at"] = ring_wins
            notes.append(f"ring / mpi-algo = horo with {coll.upper()} algo ring vs mpi (re-initialised, same run), "
                         f"time ratio (paired); ring faster (both ratios > 1) at: "
                         f"{', '.join(C.fmt_bytes(b) for b in ring_wins) or 'no size'}")
        notes.append("noise % = (max-min)/median of the rep timings, worst variant; every variant's result verified.")
        if not horo_on:
            notes.append(f"horo NOT measured: {ctx.horo_error}")
        ctx.console.table(f"{coll} float32, bus bandwidth (GB/s), np={n}", cols, rows, notes)
        summary[coll] = entry
    try:
        ctx.log("load at end: %.2f %.2f %.2f" % os.getloadavg())
    except OSError:
        pass
    return summary


if __name__ == "__main__":
    main()
