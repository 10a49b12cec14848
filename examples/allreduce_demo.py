"""All-reduce demo: checks horo against NumPy, then times horo against mpi4py's Allreduce.

    mpirun -np 2 python examples/allreduce_demo.py            # or: bash scripts/demo.sh
    mpirun -np 4 --oversubscribe python examples/allreduce_demo.py --max-size 16M

Every rank builds the same per-rank inputs from fixed seeds, so each can compute the NumPy
reference of the reduction locally and compare. The benchmark reports, per message size
(float32, op=Sum), the median over iterations of the slowest rank's time and the bus bandwidth
busbw = bytes / time * 2(n-1)/n (the nccl-tests convention: the rate each link must sustain).
"""
import argparse
import functools
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI  # initialises MPI (thread level MULTIPLE); horo.init() respects it

import horo

try:
    from ml_dtypes import bfloat16
except ImportError:  # pragma: no cover - ml_dtypes is installed by scripts/setup.sh
    bfloat16 = None

comm = MPI.COMM_WORLD


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("IB")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def fmt_size(nbytes):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def rank_input(dtype, shape, r):
    """The input rank r contributes: small values so Sum/Product stay exact and in range."""
    rng = np.random.default_rng(1000 + r)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 7, size=shape).astype(dtype) if np.dtype(dtype) != np.uint8 else \
            rng.integers(100, 256, size=shape).astype(dtype)  # uint8 sums wrap, like numpy
    return rng.standard_normal(size=shape).astype(np.float32).astype(dtype)


def numpy_reference(inputs, op, size):
    if op == horo.Sum:
        return functools.reduce(lambda a, b: a + b, inputs)
    if op == horo.Average:
        return functools.reduce(lambda a, b: a + b, inputs) * inputs[0].dtype.type(1.0 / size)
    if op == horo.Min:
        return functools.reduce(np.minimum, inputs)
    if op == horo.Max:
        return functools.reduce(np.maximum, inputs)
    if op == horo.Product:
        return functools.reduce(lambda a, b: a * b, inputs)
    raise ValueError(op)


def check_correctness():
    n, me = horo.size(), horo.rank()
    op_names = {horo.Sum: "Sum", horo.Average: "Average", horo.Min: "Min", horo.Max: "Max",
                horo.Product: "Product"}
    cases = [
        (np.float32, (1001,), horo.Sum),
        (np.float32, (257, 33), horo.Average),
        (np.float64, (3, 5, 7), horo.Sum),
        (np.float16, (4099,), horo.Sum),
        (np.int32, (1000,), horo.Min),
        (np.int32, (1000,), horo.Max),
        (np.int64, (333,), horo.Sum),
        (np.int8, (17,), horo.Product),
        (np.uint8, (4096,), horo.Sum),
    ]
    if bfloat16 is not None:
        cases.append((bfloat16, (2049,), horo.Sum))
    failures = []
    lines = []
    for i, (dtype, shape, op) in enumerate(cases):
        inputs = [rank_input(dtype, shape, r) for r in range(n)]
        expected = numpy_reference(inputs, op, n)
        name = f"demo.{i}"
        if i % 2 == 0:
            got = horo.allreduce(inputs[me], name=name, op=op)
        else:  # in place
            got = inputs[me].copy()
            horo.allreduce_(got, name=name, op=op)
        exact = np.dtype(dtype).kind in "iu" or n <= 2 or op in (horo.Min, horo.Max)
        if exact:
            ok = got.dtype == expected.dtype and got.shape == expected.shape and \
                np.array_equal(got.view(np.uint8), expected.view(np.uint8))
        else:
            ok = got.shape == expected.shape and np.allclose(
                got.astype(np.float64), expected.astype(np.float64), rtol=1e-2, atol=1e-2)
        # Every rank must hold bit-identical results.
        all_bytes = comm.allgather(got.tobytes())
        ok = ok and all(b == all_bytes[0] for b in all_bytes)
        label = f"{np.dtype(dtype).name:>8} {str(shape):>11} {op_names[op]:>7}"
        lines.append(f"  {label}  {'ok' if ok else 'MISMATCH'}{'' if exact else ' (allclose)'}")
        if not ok:
            failures.append(label)

    # A group of async allreduces, enqueued in a different order on every rank.
    tensors = [rank_input(np.float32, (10 + 7 * k,), me) for k in range(20)]
    order = list(range(len(tensors)))
    np.random.default_rng(me).shuffle(order)
    handles = {k: horo.allreduce_async(tensors[k], name=f"demo.async.{k}", op=horo.Sum) for k in order}
    ok = True
    for k in range(len(tensors)):
        got = horo.synchronize(handles[k])
        expected = numpy_reference([rank_input(np.float32, (10 + 7 * k,), r) for r in range(n)], horo.Sum, n)
        ok &= np.allclose(got, expected, rtol=1e-5, atol=1e-5) if n > 2 else np.array_equal(got, expected)
    lines.append(f"  {'20 async float32 tensors, shuffled order per rank':>29}  {'ok' if ok else 'MISMATCH'}")
    if not ok:
        failures.append("async shuffled")

    grouped = horo.grouped_allreduce([rank_input(np.float64, (5 + k,), me) for k in range(5)],
                                     name="demo.grouped", op=horo.Max)
    ok = all(np.array_equal(g, numpy_reference([rank_input(np.float64, (5 + k,), r) for r in range(n)],
                                                 horo.Max, n)) for k, g in enumerate(grouped))
    lines.append(f"  {'grouped_allreduce of 5 float64 tensors, Max':>29}  {'ok' if ok else 'MISMATCH'}")
    if not ok:
        failures.append("grouped")

    nfail = comm.allreduce(len(failures), op=MPI.SUM)
    if me == 0:
        print(f"correctness vs NumPy ({n} ranks):")
        print("\n".join(lines))
    return nfail


def time_op(fn, iters, warmup):
    """Median over iterations of the slowest rank's time for fn()."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    # The slowest rank per iteration is what a synchronous step waits for.
    slowest = np.empty(iters)
    comm.Allreduce(np.array(times), slowest, op=MPI.MAX)
    return statistics.median(slowest.tolist())


def benchmark(max_size, budget_s):
    n = horo.size()
    sizes = [s for s in (4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20) if s <= max_size]
    rows = []
    for nbytes in sizes:
        count = nbytes // 4
        inplace = np.zeros(count, np.float32)  # zeros stay zeros under repeated in-place Sum
        src = np.random.default_rng(horo.rank()).standard_normal(count).astype(np.float32)
        dst = np.empty_like(src)
        # Rough per-call cost guess (~1 GB/s worst case + 50 us) to fit the time budget.
        iters = int(max(10, min(200, budget_s / (nbytes / 1e9 + 50e-6))))
        warmup = 3
        name = f"bench.{nbytes}"
        t_mpi = time_op(lambda: comm.Allreduce(MPI.IN_PLACE, inplace, op=MPI.SUM), iters, warmup)
        t_mpi_oop = time_op(lambda: comm.Allreduce(src, dst, op=MPI.SUM), iters, warmup)
        t_horo = time_op(lambda: horo.allreduce_(inplace, name=name, op=horo.Sum), iters, warmup)
        t_horo_oop = time_op(lambda: horo.allreduce(src, name=name + ".oop", op=horo.Sum), iters, warmup)
        rows.append((nbytes, iters, t_mpi, t_mpi_oop, t_horo, t_horo_oop))

    if horo.rank() != 0:
        return
    factor = 2 * (n - 1) / n if n > 1 else 1.0

    def cell(nbytes, t):
        return f"{t * 1e6:>10.1f} {nbytes / t * factor / 1e9:>7.2f}"

    print(f"\nallreduce float32 Sum, {n} ranks, median of iters (slowest rank); "
          f"cells: latency us, busbw GB/s{'' if n > 1 else ' (n=1: algbw)'}")
    head = f"{'size':>9} {'iters':>5} | {'mpi4py in-place':>18} | {'horo allreduce_':>18} | " \
           f"{'mpi4py out-of-place':>19} | {'horo allreduce':>18} | {'horo/mpi busbw':>14}"
    print(head)
    print("-" * len(head))
    for nbytes, iters, t_mpi, t_mpi_oop, t_horo, t_horo_oop in rows:
        print(f"{fmt_size(nbytes):>9} {iters:>5} | {cell(nbytes, t_mpi)} | {cell(nbytes, t_horo)} | "
              f" {cell(nbytes, t_mpi_oop)} | {cell(nbytes, t_horo_oop)} | "
              f"{t_mpi / t_horo:>5.2f}x {t_mpi_oop / t_horo_oop:>5.2f}x")
    print("(last column: in-place, out-of-place; > 1 means horo is faster)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-size", default="64M", help="largest benchmark message (default 64M)")
    parser.add_argument("--budget", type=float, default=0.4, help="seconds per size and variant (default 0.4)")
    parser.add_argument("--no-bench", action="store_true", help="only run the correctness checks")
    args = parser.parse_args()

    horo.init(comm=comm)
    if horo.rank() == 0:
        mpi_version = MPI.Get_library_version().replace("\0", "").splitlines()[0].split(",")[0].strip()
        print(f"horo {getattr(horo, '__version__', '')} on {horo.size()} ranks "
              f"(local_size {horo.local_size()}), MPI: {mpi_version}")
    nfail = check_correctness()
    if not args.no_bench:
        benchmark(parse_size(args.max_size), args.budget)
    rank = horo.rank()
    horo.shutdown()
    if rank == 0:
        print("\nall checks passed" if nfail == 0 else f"\n{nfail} check(s) FAILED")
    return 1 if nfail else 0


if __name__ == "__main__":
    sys.exit(main())
