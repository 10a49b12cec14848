"""Keras 3 `model.fit` throughput of a ~21 M-parameter MLP: horo on N ranks vs one rank alone
(scaling efficiency) vs tf.distribute.MultiWorkerMirroredStrategy on N workers, in one run.

    mpirun -np 2 --oversubscribe python benchmarks/keras_scaling.py [--quick] [--json out.json]
    python benchmarks/keras_scaling.py [--np 2]          # launches mpirun itself

Model: Dense 3072 -> 2560 -> 2560 -> 2560 -> 10 (ReLU), SGD, sparse cross-entropy on
synthetic data; the per-rank batch is fixed (weak scaling: N ranks train an N x larger
global batch). Variants, interleaved rep by rep (order rotating):
  horo    N ranks, DistributedOptimizer (one grouped allreduce of the gradients per step)
  1 rank  rank 0 alone, the plain optimizer, same per-rank batch (the other ranks sleep)
  allreduce only   the horo step's communication without compute: grouped_allreduce of
          tensors shaped like the gradients (how much of the horo step is communication)
  mwms    N TensorFlow workers on localhost (TF_CONFIG, free ports), started once by rank 0
          and driven over a pipe; same per-worker batch (the horo ranks sleep meanwhile)
A block is `--steps` steps of one model.fit call; its time is the slowest rank's; the figure
is the median over --reps blocks. Scaling efficiency = throughput_N / (N x throughput_1)
= t_1rank / t_N per step (paired per rep). Every process uses --threads intra-op threads
(default: cores // N, so N ranks and one rank alone each get the same cores per process).
Check: after training, the horo ranks hold identical weights (exit 1 otherwise).
"""
import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

INPUT, CLASSES = 3072, 10


def parse_args(argv=None):
    p = C.base_parser(__doc__.split("\n")[0], reps=5, warmup=1, quick_reps=2, quick_warmup=1)
    p.add_argument("--hidden", type=int, default=None, help="width of the 3 hidden layers (default 2560, quick 512)")
    p.add_argument("--batch", type=int, default=32, help="batch per rank / per worker")
    p.add_argument("--steps", type=int, default=None, help="steps per timed block (default 10, quick 3)")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads per process (default cores // N)")
    p.add_argument("--no-mwms", action="store_true", help="skip the MultiWorkerMirroredStrategy baseline")
    p.add_argument("--np", type=int, default=2, help="ranks, when this script launches mpirun itself")
    p.add_argument("--mwms-worker", type=int, default=None, help=argparse_hidden())
    p.add_argument("--mwms-ports", default=None, help=argparse_hidden())
    args = C.finish_args(p.parse_args(argv))
    args.hidden = args.hidden or (512 if args.quick else 2560)
    args.steps = args.steps or (3 if args.quick else 10)
    return args


def argparse_hidden():
    import argparse

    return argparse.SUPPRESS


# --------------------------------------------------------------------------- the workload (every variant)


def configure_tf(threads):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    return tf


def build_model(args, optimizer):
    import keras

    keras.utils.set_random_seed(1234)  # the same initial weights on every rank: no broadcast needed
    model = keras.Sequential([keras.Input((INPUT,))]
                             + [keras.layers.Dense(args.hidden, activation="relu") for _ in range(3)]
                             + [keras.layers.Dense(CLASSES)])
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def synthetic_dataset(batch, seed):
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch * 8, INPUT), dtype=np.float32)
    y = rng.integers(0, CLASSES, batch * 8).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True).repeat()


def fit_block(model, dataset, steps):
    t0 = time.perf_counter()
    model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)
    return time.perf_counter() - t0


# --------------------------------------------------------------------------- MultiWorkerMirroredStrategy


def free_ports(count):
    socks = [socket.socket() for _ in range(count)]
    for s in socks:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _exit_with_parent():
    """A worker outlives nothing: if rank 0 dies, stop (else it could wait forever in a collective)."""
    import threading

    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def mwms_worker(args):
    """One MWMS worker: builds the model, then runs one block per 'go' line on stdin."""
    _exit_with_parent()
    ports = [int(p) for p in args.mwms_ports.split(",")]
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{p}" for p in ports]},
                                          "task": {"type": "worker", "index": args.mwms_worker}})
    try:
        tf = configure_tf(args.threads)
        import keras

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        with strategy.scope():
            model = build_model(args, keras.optimizers.SGD(0.01))
            model.optimizer.build(model.trainable_variables)
        # Keras 3.x's fit() first "symbolically builds" the model from one batch, reducing it with
        # strategy.reduce(PerReplica), which MultiWorkerMirroredStrategy rejects ("Attempt to convert
        # a value (PerReplica...) to a Tensor"). Model and optimizer are built above; skip that step.
        model._maybe_symbolic_build = lambda *a, **k: None
        _patch_keras_multi_worker_logs(tf)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        # The global batch is split over the workers: per-worker batch = args.batch.
        dataset = synthetic_dataset(args.batch * len(ports), seed=args.mwms_worker).with_options(options)
        for _ in range(max(1, args.warmup)):
            fit_block(model, dataset, args.steps)
        print(f"ready {model.count_params()}", flush=True)
        for line in sys.stdin:
            if line.startswith("go"):
                print(f"time {fit_block(model, dataset, int(line.split()[1]))!r}", flush=True)
            else:
                break
    except Exception as e:  # the driver reports it; never leave the other worker waiting silently
        import traceback

        traceback.print_exc()
        print(f"error {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300], flush=True)
        return 1
    return 0


def _patch_keras_multi_worker_logs(tf):
    """Keras 3.x reduces fit()'s per-step logs (scalars) under a multi-worker strategy with
    strategy.reduce("MEAN", v, axis=0), which fails on a scalar ("Invalid reduction dimension 0
    for input with 0 dimensions"). Reduce scalars with axis=None instead (only the logs; the
    gradients go through tf.distribute as usual)."""
    from keras.src.backend.tensorflow import trainer

    original = trainer.reduce_per_replica

    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and trainer._collective_all_reduce_multi_worker(strategy):
            return tf.nest.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)
        return original(values, strategy, reduction)

    trainer.reduce_per_replica = reduce_per_replica


class MWMS:
    """Rank 0's handle on the N workers (subprocesses, outside MPI)."""

    def __init__(self, args, n):
        self.error = None
        ports = free_ports(n)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OMPI_", "PMIX_", "PMI_", "PRTE_", "HORO_", "HOROVOD_"))}
        argv = [sys.executable, str(Path(__file__).resolve()), "--mwms-ports", ",".join(map(str, ports)),
                "--threads", str(args.threads), "--hidden", str(args.hidden), "--batch", str(args.batch),
                "--steps", str(args.steps), "--warmup", str(args.warmup)]
        self.procs = [subprocess.Popen(argv + ["--mwms-worker", str(i)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True, env=env) for i in range(n)]

    def _read_all(self, timeout):
        """One line from every worker; the first error (or a timeout) disables MWMS."""
        lines, deadline = {}, time.monotonic() + timeout
        while len(lines) < len(self.procs):
            pending = [p for i, p in enumerate(self.procs) if i not in lines]
            ready, _, _ = select.select([p.stdout for p in pending], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise RuntimeError(f"no answer from the MWMS workers within {timeout:.0f} s")
            for i, p in enumerate(self.procs):
                if p.stdout in ready and i not in lines:
                    line = p.stdout.readline()
                    if not line:
                        raise RuntimeError(f"MWMS worker {i} exited (code {p.poll()})")
                    if line.startswith("error"):
                        raise RuntimeError(f"MWMS worker {i}: {line[6:].strip()}")
                    lines[i] = line.split()
        return [lines[i] for i in range(len(self.procs))]

    def wait_ready(self, timeout):
        try:
            self.params = int(self._read_all(timeout)[0][1])
        except Exception as e:
            self.fail(e)

    def block(self, steps, timeout):
        if self.error:
            return None
        try:
            for p in self.procs:
                p.stdin.write(f"go {steps}\n")
                p.stdin.flush()
            return max(float(words[1]) for words in self._read_all(timeout))
        except Exception as e:
            self.fail(e)
            return None

    def fail(self, e):
        self.error = str(e)
        self.close()

    def close(self):
        for p in self.procs:
            try:
                p.stdin.close()
            except Exception:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# --------------------------------------------------------------------------- the horo job


def idle_until_rank0(comm, value=None):
    """Ranks other than 0 sleep (no busy MPI wait eating a core) until rank 0 is done; returns rank 0's value."""
    C.sleepy_barrier(comm)
    return comm.bcast(value, root=0)


def main(args):
    if not C.under_mpirun():  # driver mode: launch ourselves under mpirun
        argv = C.mpirun_argv(args.np, __file__, [a for a in sys.argv[1:]])
        return subprocess.call(argv, env=C.mpirun_env())
    from mpi4py import MPI

    n = MPI.COMM_WORLD.Get_size()
    args.threads = args.threads or max(1, (os.cpu_count() or 2) // n)
    tf = configure_tf(args.threads)
    import keras
    import numpy as np

    ctx = C.setup(args)
    if ctx.horo is None:
        C.fail(ctx, f"horo unavailable: {ctx.horo_error}")
    import horo.tensorflow.keras as hvd

    C.header(ctx, f"keras_scaling: model.fit, MLP {INPUT}-{args.hidden}x3-{CLASSES}, batch {args.batch}/rank, "
                  f"{args.steps} steps/block, {args.threads} thread(s)/process")
    mwms = MWMS(args, n) if ctx.rank == 0 and not args.no_mwms and n > 1 else None  # starts while we warm up

    model = build_model(args, hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)))
    data = synthetic_dataset(args.batch, seed=ctx.rank)
    single = build_model(args, keras.optimizers.SGD(0.01)) if ctx.rank == 0 else None
    params = model.count_params()

    def horo_block():
        ctx.comm.Barrier()
        dt = fit_block(model, data, args.steps)
        return ctx.comm.allreduce(dt, op=MPI.MAX)

    def single_block():
        return idle_until_rank0(ctx.comm, fit_block(single, data, args.steps) if ctx.rank == 0 else None)

    grads = [tf.zeros_like(v.value) for v in model.trainable_variables]

    def allreduce_block():  # the step's communication alone: what the horo step costs beyond compute
        ctx.comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            hvd.grouped_allreduce(grads, name="keras_scaling.allreduce_only")
        return ctx.comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)

    def mwms_block():
        t = mwms.block(args.steps, timeout=600) if mwms is not None else None
        return idle_until_rank0(ctx.comm, t)

    for _ in range(args.warmup):
        horo_block()
        single_block()
        allreduce_block()
    mwms_error = "skipped (--no-mwms)" if args.no_mwms else ("needs 2 or more ranks" if n < 2 else None)
    if mwms is not None:
        mwms.wait_ready(timeout=300)
    mwms_error = idle_until_rank0(ctx.comm, mwms.error if mwms is not None else mwms_error)

    variants = {"horo": horo_block, "1 rank": single_block, "allreduce only": allreduce_block}
    if mwms_error is None:
        variants["mwms"] = mwms_block
    names = list(variants)
    samples = {k: [] for k in names}
    for r in range(args.reps):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            samples[name].append(variants[name]())
    if mwms is not None:
        mwms_error = mwms_error or mwms.error
        mwms.close()
    mwms_error = idle_until_rank0(ctx.comm, mwms_error)
    if mwms_error and "mwms" in samples:
        del samples["mwms"]

    digest = np.concatenate([w.ravel() for w in model.get_weights()])
    ok = C.all_ok(ctx.comm, all(np.array_equal(digest, d) for d in ctx.comm.allgather(digest)))

    rows, results = [], {}
    ranks_of = {"horo": n, "1 rank": 1, "allreduce only": n, "mwms": n}
    for name in names:
        if name not in samples:
            rows.append([name, ranks_of[name], "-", "-", "-", "-"])
            continue
        t = C.median(samples[name]) / args.steps
        sps = ranks_of[name] * args.batch / t
        results[name] = dict(step_s=t, samples_per_s=sps, ranks=ranks_of[name], reps=samples[name])
        rows.append([name, ranks_of[name], f"{t * 1e3:.1f}", f"{1 / t:.2f}",
                     "-" if name == "allreduce only" else f"{sps:.0f}", f"{C.spread(samples[name]):.0f}"])
    eff = C.paired_ratio(samples["1 rank"], samples["horo"])  # t_1 / t_N = thr_N / (N thr_1)
    notes = [f"parameters: {params:,} ({params * 4 / 2**20:.0f} MiB of float32 gradients per step); "
             "'allreduce only': horo.tensorflow.grouped_allreduce of those gradients, no compute",
             f"scaling efficiency horo  (thr_{n} / ({n} x thr_1)): {C.fmt_ratio(eff)}"]
    if "mwms" in samples:
        notes.append(f"scaling efficiency MWMS  (thr_{n} / ({n} x thr_1)): "
                     f"{C.fmt_ratio(C.paired_ratio(samples['1 rank'], samples['mwms']))}")
        speedup = C.paired_ratio(samples["mwms"], samples["horo"])
        notes.append(f"horo vs MWMS throughput (t_mwms / t_horo): {C.fmt_ratio(speedup)}")
    else:
        notes.append(f"MultiWorkerMirroredStrategy not measured: {mwms_error}")
    notes.append(f"weights identical on every horo rank: {'yes' if ok else 'NO'}")
    if ctx.rank == 0:
        ctx.console.table("model.fit steps/s (median over reps; step = one batch per rank)",
                          ["variant", "ranks", "step ms", "steps/s", "samples/s", "noise %"], rows, notes)
    C.write_json(ctx, args.json, dict(meta=C.meta(ctx, "keras_scaling.py"), params=params, hidden=args.hidden,
                                      batch=args.batch, steps=args.steps, threads=args.threads, results=results,
                                      scaling_efficiency=eff, mwms_error=mwms_error, weights_identical=ok))
    if not ok:
        C.fail(ctx, "the horo ranks ended with different weights")
    ctx.finalize()
    return 0


if __name__ == "__main__":
    _args = parse_args()
    if _args.mwms_worker is not None:
        sys.exit(mwms_worker(_args))
    sys.exit(main(_args))
