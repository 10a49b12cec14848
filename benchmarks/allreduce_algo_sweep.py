"""Ring vs MPI allreduce inside horo, 1 KiB..256 MiB: where does horo's ring start beating MPI_Allreduce?

The answer sets the size threshold of HORO_ALLREDUCE_ALGO=auto (HORO_RING_MIN_BYTES). horo reads
its tunables from the environment at init(), so this script switches algorithm by setting
HORO_ALLREDUCE_ALGO and re-initialising horo (init/shutdown cost ~10 ms, never timed).

  mpirun -np 2 python benchmarks/allreduce_algo_sweep.py [--algos ring,mpi] [--quick] [--json out.json]
      In one run, per size and rep, in rotating order: horo with each algorithm (re-initialised
      before its block, warmed up, then timed) and mpi4py's Allreduce as a reference; prints
      median times, ring's speedup over mpi and the crossover size.

  python benchmarks/allreduce_algo_sweep.py [--np 2,4] [--quick] [--json out.json]
      (plain python) launches the above once per rank count in --np and gathers the results.
      With --relaunch, it instead launches one mpirun per algorithm and round (the environment
      fixed per launch, no re-init), alternating ring / mpi round by round.

  HORO_ALLREDUCE_ALGO=ring mpirun -np 2 python benchmarks/allreduce_algo_sweep.py --algos env
      measures horo with whatever the environment selects, against mpi4py (used by --relaunch).

float32 Sum, out-of-place. Every timed block's horo result is checked against NumPy (exit 1 if wrong).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

DEFAULT_SIZES = ",".join(f"{2 ** k}b" for k in range(10, 29))  # 1 KiB .. 256 MiB, doubling
QUICK_SIZES = ",".join(f"{4 ** k}b" for k in range(5, 13))  # 1 KiB .. 16 MiB, x4
ALGO_ENV = "HORO_ALLREDUCE_ALGO"


def parser():
    p = C.base_parser(__doc__.splitlines()[0], reps=5, warmup=2, target_s=0.1)
    p.add_argument("--sizes", default=None, help="message sizes (suffix b/KiB/MiB; bare numbers are MiB); "
                                                 "default 1 KiB..256 MiB doubling, quick 1 KiB..16 MiB x4")
    p.add_argument("--algos", default="ring,mpi",
                   help="HORO_ALLREDUCE_ALGO values to compare in one run (default ring,mpi; 'auto' may be added); "
                        "'env' = one algorithm, the environment's, no re-init")
    g = p.add_argument_group("driver (plain python) only")
    g.add_argument("--np", default=None, help="comma list of rank counts to launch (default 2,4; quick 2)")
    g.add_argument("--relaunch", action="store_true", help="one mpirun per algorithm and round instead of re-init")
    g.add_argument("--rounds", type=int, default=None, help="--relaunch: launches per algorithm and np (default 3, quick 1)")
    g.add_argument("--launch-timeout", type=float, default=1800, help="seconds one mpirun may take")
    return p


# --------------------------------------------------------------------------- worker (under mpirun)


def worker(args):
    import numpy as np

    sizes = C.parse_sizes(args.sizes or (QUICK_SIZES if args.quick else DEFAULT_SIZES))
    algos = [a for a in args.algos.split(",") if a]
    env_mode = algos == ["env"]
    if env_mode:
        algos = [os.environ.get(ALGO_ENV, os.environ.get("HOROVOD_ALLREDUCE_ALGO", "auto"))]
    # env mode: horo initialised once by setup(). Otherwise horo is (re-)initialised per block below.
    ctx = C.setup(args, need_horo=env_mode)
    comm, n = ctx.comm, ctx.size
    from mpi4py import MPI

    horo = ctx.horo
    if not env_mode:
        horo, err = C.import_horo()
        if not C.all_ok(comm, horo is not None):
            C.fail(ctx, f"horo is needed for the algorithm sweep: {err or 'unavailable on another rank'}")
    C.header(ctx, f"horo allreduce algorithms {'/'.join(algos)}{' (environment)' if env_mode else ' (re-init per block)'}")
    if env_mode and horo is None:
        C.fail(ctx, f"horo is needed for the algorithm sweep: {ctx.horo_error}")

    settle = np.zeros(1, dtype=np.float32)

    def start(algo):
        if not env_mode:
            os.environ[ALGO_ENV] = algo
            horo.init(comm=MPI.COMM_WORLD)
            # The first calls after init() take up to ~10 ms (negotiation, thread start-up): settle on a tiny
            # tensor first so the size's own warmup calls are enough.
            for _ in range(10):
                horo.allreduce(settle, name="sweep.settle", op=horo.Sum)

    def stop():
        if not env_mode:
            horo.shutdown()

    results = []
    # The first size measured in a process came out slow every time (first inits, allocator, caches):
    # run it once untimed-for-the-report first.
    for idx, nbytes in enumerate([sizes[0]] + sizes):
        discard = idx == 0
        nelem = max(1, nbytes // 4)
        x = C.pattern_input(nelem, ctx.rank)
        want = C.pattern_sum(nelem, n)
        mpi_out = np.empty_like(x)
        holder = {}
        name = f"sweep.{nbytes}"

        def horo_call():
            holder["out"] = horo.allreduce(x, name=name, op=horo.Sum)

        def mpi_call():
            comm.Allreduce(x, mpi_out, op=MPI.SUM)

        # calls per block: calibrated once, with the first algorithm, shared by every variant
        start(algos[0])
        for _ in range(max(1, args.warmup)):
            horo_call()
        iters = args.iters or C.calibrate_iters(comm, [horo_call, mpi_call], args.target_s)
        stop()
        names = algos + ["mpi4py"]
        samples = {k: [] for k in names}
        for r in range(args.reps):
            k0 = r % len(names)
            for v in names[k0:] + names[:k0]:
                if v == "mpi4py":
                    for _ in range(min(args.warmup, iters)):
                        mpi_call()
                    samples[v].append(C.time_block(comm, mpi_call, iters))
                    ok = np.array_equal(mpi_out, want)
                else:
                    start(v)
                    for _ in range(max(1, min(args.warmup, iters))):  # the first call negotiates; then the cache
                        horo_call()
                    samples[v].append(C.time_block(comm, horo_call, iters))
                    ok = np.array_equal(holder["out"], want)
                    stop()
                if not C.all_ok(comm, ok):
                    C.fail(ctx, f"{v} allreduce of {C.fmt_bytes(nbytes)} gave a wrong result")
        if discard:
            del x, want, mpi_out, holder
            continue
        results.append({"bytes": nbytes, "iters": iters, "checked": True,
                        **{k: {"median_s": C.median(v), "samples_s": v} for k, v in samples.items()}})
        ctx.log(f"  {C.fmt_bytes(nbytes):>8}: " + "  ".join(
            f"{k} {C.median(v) * 1e6:,.1f} us" for k, v in samples.items()) + f"  ({iters} calls/block, checked)")
        del x, want, mpi_out, holder

    summary = None
    if ctx.rank == 0:
        med = {a: {r["bytes"]: r[a]["median_s"] for r in results} for a in algos}
        base = {r["bytes"]: r["mpi4py"]["median_s"] for r in results}
        paired = None
        if {"ring", "mpi"} <= set(algos):
            paired = {r["bytes"]: C.paired_ratio(r["mpi"]["samples_s"], r["ring"]["samples_s"]) for r in results}
        how = (f"{args.reps} reps per size, each variant's block timed right after the others'; "
               f"every block's result verified.")
        summary = summarize(ctx.console, n, sizes, algos, med, base, None, how, paired=paired)
    C.write_json(ctx, args.json, {"meta": {**C.meta(ctx, "allreduce_algo_sweep"), "algos": algos,
                                           "mode": "env" if env_mode else "reinit"},
                                  "results": results, "summary": summary})
    ctx.finalize()


# --------------------------------------------------------------------------- summary


def crossover(sizes, speedup, floor=1.0):
    """Smallest size from which ring's speedup > floor at every larger size, and the first size it wins at all."""
    sustained = None
    for s in reversed(sizes):
        if speedup[s] > floor:
            sustained = s
        else:
            break
    first = next((s for s in sizes if speedup[s] > 1.0), None)
    return sustained, first


def smooth3(sizes, speedup):
    """Median of each size's speedup and its two neighbours': one noisy size (a burst from another job)
    must not move the crossover, a real trend over adjacent sizes does."""
    out = {}
    for i, s in enumerate(sizes):
        window = [speedup[x] for x in sizes[max(0, i - 1):i + 2]]
        out[s] = C.median(window)
    return out


def summarize(printer, np_, sizes, algos, med, base, norm, how, paired=None):
    """med: algo -> size -> seconds; base: size -> mpi4py seconds; norm (optional): algo -> size -> horo/mpi4py
    (relaunch mode); paired (optional): size -> median over reps of t(mpi)/t(ring) within a rep (re-init mode)."""
    out = {"sizes": sizes, "median_s": med, "mpi4py_median_s": base, "normalized_to_mpi4py": norm}
    pair = {"ring", "mpi"} <= set(algos)
    speed = {s: med["mpi"][s] / med["ring"][s] for s in sizes} if pair else {}
    speed_norm = {s: norm["mpi"][s] / norm["ring"][s] for s in sizes} if pair and norm else {}
    if pair and paired:
        speed_norm = paired
    alt = "normalized" if norm else "paired"
    cols = ["size"] + [f"{a} us" for a in algos] + ["mpi4py us"]
    if pair:
        cols += ["ring speedup"] + ([alt] if speed_norm else []) + ["ring busbw", "mpi busbw", "faster"]
    rows = []
    for s in sizes:
        row = [C.fmt_bytes(s)] + [f"{med[a][s] * 1e6:,.1f}" for a in algos] + [f"{base[s] * 1e6:,.1f}"]
        if pair:
            row += [C.fmt_ratio(speed[s])] + ([C.fmt_ratio(speed_norm[s])] if speed_norm else [])
            row += [f"{C.busbw_gbs(s, med['ring'][s], np_):.2f}", f"{C.busbw_gbs(s, med['mpi'][s], np_):.2f}",
                    "ring" if speed[s] > 1.0 else "mpi"]
        rows.append(row)
    notes = [f"<algo> us = horo.allreduce with HORO_ALLREDUCE_ALGO=<algo>; mpi4py = comm.Allreduce reference; "
             f"medians. {how}"]
    if pair:
        sustained, first = crossover(sizes, speed)
        notes.append("ring speedup = t(mpi) / t(ring) of the medians (> 1: ring faster); busbw in GB/s"
                     + ("; 'normalized' divides each launch's horo time by that launch's mpi4py time first "
                        "(cancels drift between launches)." if norm else
                        "; 'paired' = median over reps of t(mpi)/t(ring) within each rep (load bursts cancel)."
                        if speed_norm else "."))
        tolerant, _ = crossover(sizes, speed, floor=0.95)
        line = (f"crossover (ring faster at this size and every larger one): "
                f"{C.fmt_bytes(sustained) if sustained else 'none'}; allowing ties within 5%: "
                f"{C.fmt_bytes(tolerant) if tolerant else 'none'}; first size where ring wins at all: "
                f"{C.fmt_bytes(first) if first else 'none'}")
        out["crossover_bytes_within_5pct"] = tolerant
        if speed_norm:
            sustained_n, _ = crossover(sizes, speed_norm)
            line += f"; {alt} crossover: {C.fmt_bytes(sustained_n) if sustained_n else 'none'}"
            out.update({f"ring_speedup_{alt}": speed_norm, f"crossover_bytes_{alt}": sustained_n})
        notes.append(line + ".")
        basis = speed_norm if speed_norm else speed
        # Below ~100 KiB both algorithms cost horo's coordination round (tens of us) and tie within noise:
        # ask for a clear (>= 5%) win, sustained, on the smoothed curve.
        robust, _ = crossover(sizes, smooth3(sizes, basis), floor=1.05)
        notes.append(f"suggested auto threshold (ring >= 5% faster from here up, {alt if speed_norm else 'median'} "
                     f"speedup smoothed over 3 adjacent sizes): HORO_RING_MIN_BYTES="
                     f"{robust if robust else 'none (ring never sustainably faster)'}"
                     + (f" ({C.fmt_bytes(robust)})" if robust else ""))
        out["suggested_ring_min_bytes"] = robust
        out.update({"ring_speedup": speed, "crossover_bytes": sustained, "first_ring_win_bytes": first})
    printer.table(f"horo allreduce by algorithm, float32 Sum, np={np_} (microseconds per call)", cols, rows, notes)
    return out


# --------------------------------------------------------------------------- driver (plain python)


def launch(np_, script_args, env_extra, timeout, stream):
    argv = C.mpirun_argv(np_, os.path.abspath(__file__), script_args)
    env = C.mpirun_env(env_extra)
    if stream:
        proc = subprocess.run(argv, env=env, timeout=timeout)
        return proc.returncode, ""
    try:
        proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        return proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return "timeout", out


def driver(args):
    nps = [int(v) for v in (args.np or ("2" if args.quick else "2,4")).split(",") if v]
    passthrough = ["--reps", str(args.reps), "--warmup", str(args.warmup), "--target-s", str(args.target_s)]
    passthrough += ["--quick"] if args.quick else []
    passthrough += ["--sizes", args.sizes] if args.sizes else []
    passthrough += ["--iters", str(args.iters)] if args.iters else []
    passthrough += ["--plain"] if args.plain else []
    report = {"meta": {"script": "allreduce_algo_sweep", "argv": sys.argv, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                       "cpus": os.cpu_count(), "mode": "relaunch" if args.relaunch else "reinit"}, "by_np": {}}
    with tempfile.TemporaryDirectory(prefix="horo_sweep_") as tmp:
        for np_ in nps:
            if args.relaunch:
                report["by_np"][str(np_)] = relaunch(args, np_, passthrough, tmp)
                continue
            out = os.path.join(tmp, f"np{np_}.json")
            print(f"### mpirun -np {np_} allreduce_algo_sweep.py --algos {args.algos}", flush=True)
            rc, _ = launch(np_, [*passthrough, "--algos", args.algos, "--json", out], None, args.launch_timeout, True)
            if rc != 0 or not os.path.exists(out):
                print(f"launch np={np_} failed (rc={rc})", flush=True)
                raise SystemExit(1)
            report["by_np"][str(np_)] = json.load(open(out))
            print(flush=True)
    crossings = {k: (v.get("summary") or v).get("suggested_ring_min_bytes") for k, v in report["by_np"].items()}
    print("suggested HORO_RING_MIN_BYTES by np: "
          + ", ".join(f"np={k}: {C.fmt_bytes(b) if b else 'none'}" for k, b in crossings.items()), flush=True)
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump(report, f, indent=2)
        os.replace(args.json + ".tmp", args.json)
        print(f"results written to {args.json}", flush=True)


def relaunch(args, np_, passthrough, tmp):
    """One mpirun per algorithm and round, HORO_ALLREDUCE_ALGO fixed per launch, alternating which goes first."""
    rounds = args.rounds or (1 if args.quick else 3)
    algos = [a for a in args.algos.split(",") if a]
    print(f"== np={np_}: {rounds} round(s) x {len(algos)} launches, {args.reps} rep(s) per launch | "
          f"load {' '.join('%.2f' % v for v in os.getloadavg())} ==", flush=True)
    launches = {a: [] for a in algos}
    for rnd in range(rounds):
        for algo in algos[rnd % len(algos):] + algos[:rnd % len(algos)]:
            out = os.path.join(tmp, f"np{np_}_{algo}_{rnd}.json")
            t0 = time.time()
            rc, log = launch(np_, [*passthrough, "--algos", "env", "--json", out], {ALGO_ENV: algo},
                             args.launch_timeout, False)
            if rc != 0 or not os.path.exists(out):
                print(f"launch np={np_} {ALGO_ENV}={algo} failed (rc={rc}); its output:\n"
                      + "\n".join(log.splitlines()[-40:]), flush=True)
                raise SystemExit(1)
            launches[algo].append(json.load(open(out))["results"])
            print(f"  np={np_} round {rnd + 1}/{rounds} {algo:>5}: {time.time() - t0:.1f} s", flush=True)
    sizes = [r["bytes"] for r in launches[algos[0]][0]]
    med, norm, base = {a: {} for a in algos}, {a: {} for a in algos}, {}
    for i, s in enumerate(sizes):
        pooled = []
        for a in algos:
            med[a][s] = C.median([t for run in launches[a] for t in run[i][a]["samples_s"]])
            norm[a][s] = C.median([run[i][a]["median_s"] / run[i]["mpi4py"]["median_s"] for run in launches[a]])
            pooled += [t for run in launches[a] for t in run[i]["mpi4py"]["samples_s"]]
        base[s] = C.median(pooled)
    return summarize(C.Printer(plain=args.plain), np_, sizes, algos, med, base, norm,
                     f"{rounds} launch(es) per algorithm x {args.reps} reps.")


def main():
    args = C.finish_args(parser().parse_args())
    if C.under_mpirun():
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
