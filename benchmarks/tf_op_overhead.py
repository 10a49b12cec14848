"""Per-call cost of a small allreduce inside tf.function: horo's native AsyncOpKernel vs the
tf.numpy_function fallback, in one run.

    mpirun -np 2 --oversubscribe python benchmarks/tf_op_overhead.py [--quick] [--json out.json]

Each variant is a tf.function that allreduces one --bytes float32 tensor (default 4 KiB)
with Sum; both run on the same ranks, interleaved rep by rep (order rotating). A block is
`iters` back-to-back calls; its time is the slowest rank's per call; the figure is the
median over --reps blocks, and the ratio is paired per rep. Check: both variants return
the NumPy sum.
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
    p = C.base_parser(__doc__.split("\n")[0], reps=7, warmup=20, quick_reps=3, quick_warmup=5)
    p.add_argument("--bytes", type=int, default=4 * C.KiB, help="tensor size in bytes (float32)")
    args = C.finish_args(p.parse_args())
    import numpy as np
    import tensorflow as tf

    ctx = C.setup(args)
    if ctx.horo is None:
        sys.exit(1)
    from horo.tensorflow import native, numpy_ops
    from horo.tensorflow.native_ops import NativeOps

    lib = native.library()
    if lib is None:
        ctx.log(f"the native op library is unavailable: {native.describe()}")
        sys.exit(1)
    native_ops = NativeOps(lib)
    C.header(ctx, "tf.function allreduce per-call cost: native op vs numpy_function")
    n = max(1, args.bytes // 4)
    x = tf.constant(np.arange(n, dtype=np.float32) + ctx.rank)

    def compiled(impl, name):
        return tf.function(lambda t: impl.allreduce_group([t], [name], 1, 1.0, 1.0, None)[0])

    functions = {"native AsyncOpKernel": compiled(native_ops, "bench.native"),
                 "numpy_function": compiled(numpy_ops, "bench.numpy")}
    expected = sum(np.arange(n, dtype=np.float32) + r for r in range(ctx.size))
    ok = all(np.array_equal(f(x).numpy(), expected) for f in functions.values())
    samples, iters = C.interleaved(ctx.comm, {k: (lambda f=f: f(x)) for k, f in functions.items()},
                                   args.reps, args.warmup, args.iters, args.target_s)
    ratio = C.paired_ratio(samples["numpy_function"], samples["native AsyncOpKernel"])
    rows = [[k, f"{C.median(v) * 1e6:.1f}", f"{C.spread(v):.0f}%"] for k, v in samples.items()]
    if ctx.rank == 0:
        title = f"{C.fmt_bytes(4 * n)} float32 Sum allreduce in tf.function, np={ctx.size}, {iters} calls/block"
        C.Printer(args.plain).table(title, ["variant", "us/call (median)", "spread"], rows,
                                    [f"numpy_function / native (paired per rep): {C.fmt_ratio(ratio)}",
                                     f"results equal the NumPy sum: {ok}"])
    C.write_json(ctx, args.json, {"meta": C.meta(ctx, "tf_op_overhead.py"), "iters": iters,
                                   "samples_s": samples, "ratio_numpy_over_native": ratio, "ok": ok})
    ctx.finalize()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
