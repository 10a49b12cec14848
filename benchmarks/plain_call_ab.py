"""The core's lane for the common blocking call against the full Python path, with MPI's own collective beside them.

    mpirun -np 2 python benchmarks/plain_call_ab.py [--sizes 4K,16K,64K,256K] [--only allgather,alltoall] [--quick]

A blocking call of a plain NumPy array in the global set goes to the core in one call (horo/enqueue.py
plain_call, bindings.cc run_plain); any other call takes the full path (each collective's module
`_start`). Both run here on the same array, in the same job, blocks taking turns with mpi4py's
collective: per size, each variant's median time per call, lane/full (below 1: the lane is faster)
and MPI time / each horo variant's time. Every variant's result is checked against NumPy.
"""
import importlib
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


def variants(horo, comm, x, size, rank):
    """{collective: ({variant: call}, expected result)}: lane, full (the module's _start) and mpi4py.
    Broadcast is in place (`broadcast_`, as MPI's), into `b`, which starts as a copy of x."""
    from mpi4py import MPI

    full = {m: importlib.import_module(f"horo.{m}")._start
            for m in ("allgather", "alltoall", "broadcast", "reducescatter", "allreduce")}
    rooted = importlib.import_module("horo.rooted")  # gather, scatter and reduce to root 0: None elsewhere
    n = x.size
    part = n // size
    gathered = np.concatenate([x - rank + r for r in range(size)])
    summed = x * size - rank * size + size * (size - 1) // 2  # x = pattern + rank
    outs = {k: np.empty(n * size if k == "allgather" else n, x.dtype) for k in ("allgather", "alltoall", "allreduce", "rs")}
    at_root = lambda out: out if rank == 0 else None  # noqa: E731
    b = x.copy()
    return {
        "allgather": ({"lane": lambda: horo.allgather(x, name="ab.ag"), "full": lambda: full["allgather"](x, "ab.ag", None, True),
                       "mpi4py": lambda: (comm.Allgather(x, outs["allgather"]), outs["allgather"])[1]}, gathered),
        "alltoall": ({"lane": lambda: horo.alltoall(x, name="ab.a2a"),
                      "full": lambda: full["alltoall"](x, None, "ab.a2a", None, True),
                      "mpi4py": lambda: (comm.Alltoall(x, outs["alltoall"]), outs["alltoall"])[1]},
                     np.concatenate([(x - rank + r)[rank * part:(rank + 1) * part] for r in range(size)])),
        "reducescatter": ({"lane": lambda: horo.reducescatter(x, op=horo.Sum, name="ab.rs"),
                           "full": lambda: full["reducescatter"](x, horo.Sum, "ab.rs", 1.0, 1.0, None, True),
                           "mpi4py": lambda: (comm.Reduce_scatter_block(x, outs["rs"][:part], op=MPI.SUM), outs["rs"][:part])[1]},
                          summed[rank * part:(rank + 1) * part]),
        "allreduce": ({"lane": lambda: horo.allreduce(x, op=horo.Sum, name="ab.ar"),
                       "full": lambda: full["allreduce"](x, None, "ab.ar", horo.Sum, 1.0, 1.0, None, False, True),
                       "mpi4py": lambda: (comm.Allreduce(x, outs["allreduce"], op=MPI.SUM), outs["allreduce"])[1]}, summed),
        "broadcast_": ({"lane": lambda: horo.broadcast_(b, 0, name="ab.bc"),
                        "full": lambda: full["broadcast"](b, 0, "ab.bc", None, True, True),
                        "mpi4py": lambda: (comm.Bcast(b, 0), b)[1]}, x - rank),  # rank 0's input
        "gather": ({"lane": lambda: horo.gather(x, 0, name="ab.ga"), "full": lambda: rooted._gather(x, 0, "ab.ga", None, True),
                    "mpi4py": lambda: (comm.Gather(x, outs["allgather"], root=0), at_root(outs["allgather"]))[1]},
                   at_root(gathered)),
        "scatter": ({"lane": lambda: horo.scatter(x, 0, name="ab.sc"), "full": lambda: rooted._scatter(x, 0, "ab.sc", None, True),
                     "mpi4py": lambda: (comm.Scatter(x, outs["rs"][:part], root=0), outs["rs"][:part])[1]},
                    (x - rank)[rank * part:(rank + 1) * part]),
        "reduce": ({"lane": lambda: horo.reduce(x, 0, op=horo.Sum, name="ab.rd"),
                    "full": lambda: rooted._reduce(x, 0, horo.Sum, "ab.rd", 1.0, 1.0, None, True),
                    "mpi4py": lambda: (comm.Reduce(x, outs["allreduce"], op=MPI.SUM, root=0), at_root(outs["allreduce"]))[1]},
                   at_root(summed)),
    }, b


def same(got, expected):
    """A gather's or reduce's ranks other than the root get None."""
    return got is None if expected is None else np.array_equal(np.asarray(got), expected)


def main():
    p = C.base_parser(__doc__.splitlines()[0], reps=15, warmup=5)
    p.add_argument("--sizes", default="4K,16K,64K,256K", help="bytes per rank (float32)")
    p.add_argument("--only", default="", help="comma-separated collectives (default: all eight; broadcast_ in place)")
    args = C.finish_args(p.parse_args())
    ctx = C.setup(args)
    horo, comm, size, rank = ctx.horo, ctx.comm, ctx.size, ctx.rank
    if horo is None:
        C.fail(ctx, f"horo is not available: {ctx.horo_error}")
    C.header(ctx, "the core's lane against the full path")
    rows, results = [], []
    for nbytes in C.parse_sizes(args.sizes):
        n = nbytes // 4 // size * size  # whole parts for alltoall and reducescatter
        x = (np.arange(n) % 251 + rank).astype(np.float32)  # small integers: every sum is exact
        cases, broadcast_buffer = variants(horo, comm, x, size, rank)
        for collective, (calls, expected) in cases.items():
            if args.only and collective not in args.only.split(","):
                continue
            for name, call in calls.items():
                np.copyto(broadcast_buffer, x)  # each broadcast_ checked from this rank's own input
                if not C.all_ok(comm, same(call(), expected)):
                    C.fail(ctx, f"{collective} ({name}) of {C.fmt_bytes(nbytes)} differs from NumPy on some rank")
            times, iters = C.interleaved(comm, calls, args.reps, args.warmup, args.iters, args.target_s)
            us = {k: C.median(v) * 1e6 for k, v in times.items()}
            results.append({"collective": collective, "bytes": nbytes, "iters": iters, "median_us": us,
                            "lane_over_full": C.paired_ratio(times["lane"], times["full"])})
            rows.append([collective, C.fmt_bytes(nbytes), f"{us['lane']:.2f}", f"{us['full']:.2f}", f"{us['mpi4py']:.2f}",
                         f"{results[-1]['lane_over_full']:.2f}", f"{us['mpi4py'] / us['lane']:.2f}",
                         f"{us['mpi4py'] / us['full']:.2f}"])
    if rank == 0:
        ctx.console.table(f"the core's lane against the full path, np={size} (microseconds per call)",
                          ["collective", "size", "lane", "full", "mpi4py", "lane/full", "mpi/lane", "mpi/full"], rows,
                          ["median over reps of the slowest rank's time per call; lane/full paired per rep; "
                           "mpi/x above 1: horo faster."])
    C.write_json(ctx, args.json, {"meta": C.meta(ctx, "plain_call_ab"), "results": results})
    ctx.finalize()


if __name__ == "__main__":
    main()
