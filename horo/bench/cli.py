"""horo-bench: nccl-tests style benchmark of one horo collective over a range of sizes.

    mpirun -np 2 horo-bench allreduce -b 8 -e 256M -f 2 --dtype float32 --op sum --iters 20 --warmup 5

Rank 0 prints one row per size: bytes, count, dtype, op, then per variant time (µs; median over
iterations of the slowest rank), algbw and busbw (GB/s, nccl-tests factors) and #wrong (elements,
over all ranks and iterations, that differ from the NumPy reference). --baseline adds MPI's own
collective (mpi4py) and a ratio column (MPI time / horo time: above 1, horo is faster).
The exit status is 1 when any result was wrong.

`horo-bench model [--plot PNG]` fits an α–β cost model on the job's links (intra- and cross-host)
and predicts allreduce busbw at 8-1024 ranks (see horo/bench/model.py for the equations).

`horo-bench fused [--model module:attr] [--baseline]` times a whole model's gradient allreduce
with tensor fusion on and off instead (see horo/bench/fused.py, `horo-bench fused --help`).
"""
import argparse
import os
import sys

from horo.bench import collectives, data, sizes

ALGO_VARS = ("HORO_ALLREDUCE_ALGO", "HORO_ALLGATHER_ALGO", "HORO_REDUCESCATTER_ALGO")


def build_parser():
    p = argparse.ArgumentParser(prog="horo-bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("collective", choices=collectives.NAMES,
                   help="the collective to time (or `fused`: a model's gradients, fusion on vs off)")
    p.add_argument("-b", "--minbytes", default="8", help="smallest size (bytes; K/M/G suffixes), default 8")
    p.add_argument("-e", "--maxbytes", default="64M", help="largest size, default 64M")
    p.add_argument("-f", "--stepfactor", type=int, default=2, help="multiply the size by this each step (default 2)")
    p.add_argument("-i", "--stepbytes", default=None, help="add this many bytes each step instead of -f")
    p.add_argument("-d", "--dtype", default="float32", choices=data.DTYPES)
    p.add_argument("-o", "--op", default="sum", help="reduction op: sum, avg, min, max, prod (default sum)")
    p.add_argument("-n", "--iters", type=int, default=20, help="timed iterations per size (default 20)")
    p.add_argument("-w", "--warmup", type=int, default=5, help="untimed iterations per size (default 5)")
    p.add_argument("-r", "--root", type=int, default=0, help="root rank of broadcast, gather, scatter and reduce (default 0)")
    p.add_argument("--algo", choices=("ring", "mpi", "auto"), default=None,
                   help="horo's algorithm: sets HORO_ALLREDUCE_ALGO/HORO_ALLGATHER_ALGO/HORO_REDUCESCATTER_ALGO")
    p.add_argument("--baseline", action="store_true", help="also time MPI's own collective (mpi4py); adds a ratio column")
    p.add_argument("--fresh-inputs", action="store_true",
                   help="store every rank's input again (same values, untimed) before each call, as a training step "
                        "writes its tensors; by default inputs stay unchanged between calls, as in nccl-tests")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON (rank 0)")
    p.add_argument("--csv", metavar="PATH", help="write the results as CSV (rank 0)")
    p.add_argument("--plot", metavar="PNG", help="draw busbw vs size to this PNG (needs matplotlib)")
    p.add_argument("--no-progress", action="store_true", help="no progress display on stderr")
    return p


def parse_args(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    try:
        args.op = data.canonical_op(args.op)
        args.sizes = sizes.size_sequence(args.minbytes, args.maxbytes, args.stepfactor, args.stepbytes)
    except ValueError as e:
        p.error(str(e))
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be >= 1 and --warmup >= 0")
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["fused"]:
        from horo.bench import fused

        return fused.main(argv[1:])
    if argv[:1] == ["model"]:
        from horo.bench import model

        return model.main(argv[1:])
    args = parse_args(argv)
    if args.algo is not None:  # read by horo.init(): must be set before it
        for var in ALGO_VARS:
            os.environ[var] = args.algo

    from mpi4py import MPI

    import horo
    from horo.bench import table, timing
    from horo.bench.progress import Progress

    horo.init(comm=MPI.COMM_WORLD)
    comm = MPI.COMM_WORLD.Dup()
    rank, n = comm.Get_rank(), comm.Get_size()
    dtype = data.numpy_dtype(args.dtype)
    if not 0 <= args.root < n:
        if rank == 0:
            print(f"horo-bench: --root {args.root} is not a rank (world of {n})", file=sys.stderr)
        horo.shutdown()
        return 2
    counts = sizes.element_counts(args.sizes, dtype.itemsize, collectives.count_multiple(args.collective, n))
    factor = collectives.busbw_factor(args.collective, n)
    op_label = args.op.lower() if args.collective in collectives.REDUCING else "none"
    horo_variant = f"horo-{args.algo}" if args.algo else "horo"
    variants = [horo_variant] + (["mpi"] if args.baseline else [])

    def say(*a):
        if rank == 0:
            print(*a, flush=True)

    say(f"# horo-bench {args.collective}: {n} ranks, dtype {dtype.name}, op {op_label}, "
        f"iters {args.iters}, warmup {args.warmup}, algo {args.algo or 'default'}"
        + (f", root {args.root}" if args.collective in collectives.ROOTED else "")
        + (", inputs rewritten before each call" if args.fresh_inputs else ""))
    say(f"# time: median over iterations of the slowest rank; busbw = algbw * {factor:g}")
    say(table.header(variants, args.baseline))

    records, baseline_ok = [], args.baseline
    progress = Progress(len(counts), enabled=(rank == 0 and not args.no_progress),
                        desc=f"horo-bench {args.collective}")
    for count in counts:
        case = collectives.Case(args.collective, count, dtype, args.op, rank, n, args.root)
        nbytes = case.nbytes()
        variants_of_size = {horo_variant: timing.Variant(case.horo_call(horo), case.wrong)}
        if baseline_ok:
            try:
                fn, out = case.mpi_call(comm)
            except (TypeError, KeyError, ValueError, NotImplementedError, MPI.Exception) as e:
                baseline_ok = False
                say(f"# baseline disabled: MPI cannot run {args.collective} on {dtype.name} ({e})")
            else:
                reset = None if out is case.input else (lambda out=out: out.fill(0))
                variants_of_size["mpi"] = timing.Variant(lambda fn=fn, out=out: (fn(), out)[1],
                                                         lambda o, case=case: case.wrong(o, baseline=True), reset)
        per_size = {name: table.record(args.collective, name, nbytes, count, dtype.name, op_label, n, t, factor, wrong)
                    for name, (t, wrong) in timing.measure(comm, variants_of_size, args.iters, args.warmup,
                                                        case.rewrite_input if args.fresh_inputs else None).items()}
        size_records = list(per_size.values())
        if "mpi" in per_size:
            table.add_ratios(size_records, horo_variant, "mpi")
        records += size_records
        progress.step(f"{sizes.fmt_bytes(nbytes)}B")
        say(table.row(per_size, variants, args.baseline))
    progress.close()

    total_wrong = sum(r["wrong"] for r in records)
    status = 0
    if rank == 0:
        print(f"# out of bounds values: {total_wrong} {'OK' if total_wrong == 0 else 'FAILED'}")
        meta = {"collective": args.collective, "nranks": n, "dtype": dtype.name, "op": op_label,
                "algo": args.algo or "default", "iters": args.iters, "warmup": args.warmup,
                "busbw_factor": factor, "variants": variants, "total_wrong": total_wrong,
                "fresh_inputs": args.fresh_inputs}
        if args.json:
            table.write_json(args.json, meta, records)
            print(f"# wrote {args.json}")
        if args.csv:
            table.write_csv(args.csv, records)
            print(f"# wrote {args.csv}")
        if args.plot:
            from horo.bench.plot import plot

            msg = plot(args.plot, records, f"horo-bench {args.collective} ({n} ranks, {dtype.name})")
            print(f"# {msg}" if msg else f"# wrote {args.plot}", file=sys.stderr if msg else sys.stdout)
        sys.stdout.flush()
    if total_wrong:
        status = 1
    comm.Free()
    horo.shutdown()
    return status
