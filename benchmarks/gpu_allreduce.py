"""GPU allreduce: horo's NCCL path vs a raw ncclAllReduce, and MPI staging vs the CPU path. Needs a GPU.

    mpirun -np 1 python benchmarks/gpu_allreduce.py nccl      [--sizes 64,256,1024] [--reps 5]
    mpirun -np 1 python benchmarks/gpu_allreduce.py resnet50  # 161 fused gradients vs one packed ncclAllReduce
    mpirun -np 1 python benchmarks/gpu_allreduce.py overhead  # host cost per tensor, GPU vs CPU
    HORO_GPU_TRANSPORT=mpi mpirun --oversubscribe -np 2 python benchmarks/gpu_allreduce.py staging [--sizes 4,16,64]

nccl: float32 Sum of one CUDA tensor per size (MiB), horo.torch.allreduce_ vs ncclAllReduce called
directly (ctypes, on the same libnccl horo loaded, its own communicator, in place, same stream); both
timed with torch.cuda events around a block of calls, interleaved rep by rep; median per-call time
and the ratio horo/raw (target <= 1.05 from 64 MiB).
resnet50: ResNet-50's 161 gradient shapes as CUDA tensors, allreduce_async_ + synchronize (fused on
the device) vs one ncclAllReduce of a buffer of the same total size (target <= 1.2).
overhead: horo's host time per tensor (enqueue, then synchronize) for 161 small CUDA tensors against
161 small CPU tensors: what horo adds per GPU tensor, which NCCL's time does not hide at np=1.
staging: HORO_GPU_TRANSPORT=mpi, CUDA tensors through pinned host memory and MPI vs horo on CPU
tensors of the same size (busbw ratio, target >= 0.8). Every result is checked against the exact
integer-valued sum before timing.
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

import numpy as np
import torch
from mpi4py import MPI

import horo
import horo.torch as hvd
from horo.bench.models import RESNET50_SHAPES

MiB = 1 << 20


class RawNccl:
    """ncclAllReduce through ctypes on the libnccl horo loaded: the baseline with nothing around it."""

    def __init__(self, comm):
        info = horo.gpu_info()
        if info.nccl_version is None:
            sys.exit(f"NCCL does not load: {info.nccl_reason}")
        self.lib = ctypes.CDLL(info.nccl_path)
        uid = ctypes.create_string_buffer(128)
        if comm.rank == 0:
            assert self.lib.ncclGetUniqueId(uid) == 0
        raw = comm.bcast(uid.raw if comm.rank == 0 else None, root=0)
        uid = ctypes.create_string_buffer(raw, 128)
        self.comm = ctypes.c_void_p()

        class UniqueId(ctypes.Structure):
            _fields_ = [("internal", ctypes.c_char * 128)]

        ident = UniqueId.from_buffer_copy(uid.raw)
        assert self.lib.ncclCommInitRank(ctypes.byref(self.comm), comm.size, ident, comm.rank) == 0

    def allreduce_(self, t):
        stream = torch.cuda.current_stream().cuda_stream
        ncclFloat32, ncclSum = 7, 0
        rc = self.lib.ncclAllReduce(ctypes.c_void_p(t.data_ptr()), ctypes.c_void_p(t.data_ptr()),
                                    ctypes.c_size_t(t.numel()), ncclFloat32, ncclSum, self.comm,
                                    ctypes.c_void_p(stream))
        assert rc == 0, rc


def timed(fn, iters, comm):
    """Per-call seconds of `iters` calls, between two events on the current stream (slowest rank)."""
    comm.Barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return comm.allreduce(start.elapsed_time(end) / 1e3 / iters, op=MPI.MAX)


def host_timed(fn, iters, comm):
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return comm.allreduce((time.perf_counter() - t0) / iters, op=MPI.MAX)


def compare(variants, reps, iters, comm, timer=timed):
    """{name: median seconds}, the variants interleaved rep by rep, each warmed up first."""
    for fn in variants.values():
        fn()
    torch.cuda.synchronize()
    samples = {name: [] for name in variants}
    for rep in range(reps):
        names = list(variants)
        names = names[rep % len(names):] + names[:rep % len(names)]
        for name in names:
            samples[name].append(timer(variants[name], iters, comm))
    return {name: statistics.median(s) for name, s in samples.items()}


def busbw(nbytes, seconds, n):
    return nbytes / seconds * 2 * (n - 1) / max(n, 1) / 1e9 if n > 1 else nbytes / seconds / 1e9


def check_sum(t, n, what):
    expected = n * (n + 1) / 2
    got = t.float().mean().item()
    if got != expected:
        sys.exit(f"{what}: wrong result {got}, expected {expected}")


def nccl_sizes(args, comm, n, me):
    raw = RawNccl(comm)
    if me == 0:
        print(f"# horo {horo.__version__}, NCCL {horo.nccl_version()}, {torch.cuda.get_device_name()}, np={n}")
        print(f"{'MiB':>6} {'horo ms':>9} {'raw ms':>9} {'horo/raw':>9} {'horo busbw GB/s':>16}")
    for mib in args.sizes:
        t = torch.full((mib * MiB // 4,), me + 1.0, device="cuda")
        hvd.allreduce_(t, op=hvd.Sum, name="check")
        check_sum(t, n, f"horo {mib} MiB")
        t.fill_(1.0)  # keeps sums exact and finite across the timed calls (values grow by n each call)
        r = compare({"horo": lambda: hvd.allreduce_(t, op=hvd.Sum, name="bench"),
                     "raw": lambda: raw.allreduce_(t)}, args.reps, args.iters, comm)
        if me == 0:
            print(f"{mib:>6} {r['horo'] * 1e3:>9.3f} {r['raw'] * 1e3:>9.3f} {r['horo'] / r['raw']:>9.3f} "
                  f"{busbw(mib * MiB, r['horo'], n):>16.1f}")


def host_split(tensors, prefix, reps, comm):
    """Median host seconds per tensor of a step that enqueues every tensor (allreduce_async_), then
    synchronizes them: (enqueue: Python and the core's submit; synchronize: the background thread's
    fusion, copies and collective, and the device's work)."""
    enqueued, synchronized = [], []
    for _ in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        handles = [hvd.allreduce_async_(t, op=hvd.Sum, name=f"{prefix}.{i}") for i, t in enumerate(tensors)]
        t1 = time.perf_counter()
        for h in handles:
            hvd.synchronize(h)
        torch.cuda.synchronize()
        enqueued.append((t1 - t0) / len(tensors))
        synchronized.append((time.perf_counter() - t1) / len(tensors))
    return statistics.median(enqueued), statistics.median(synchronized)


def resnet50(args, comm, n, me):
    raw = RawNccl(comm)
    grads = [torch.ones(s, device="cuda") for s in RESNET50_SHAPES]
    packed = torch.ones(sum(g.numel() for g in grads), device="cuda")

    def horo_step():
        handles = [hvd.allreduce_async_(g, op=hvd.Sum, name=f"resnet.{i}") for i, g in enumerate(grads)]
        for h in handles:
            hvd.synchronize(h)

    r = compare({"horo": horo_step, "raw": lambda: raw.allreduce_(packed)}, args.reps, args.iters, comm)
    e, s = host_split(grads, "resnet", args.reps * args.iters, comm)
    if me == 0:
        print(f"# ResNet-50 gradients: {len(grads)} tensors, {packed.numel() * 4 / MiB:.1f} MiB, np={n}")
        print(f"horo fused {r['horo'] * 1e3:.3f} ms, raw packed ncclAllReduce {r['raw'] * 1e3:.3f} ms, "
              f"ratio {r['horo'] / r['raw']:.3f}")
        print(f"host time of a step (median): enqueue {e * 1e6:.1f} us a tensor, synchronize {s * 1e6:.1f} us a tensor")


def overhead(args, comm, n, me):
    """horo's host cost per tensor, GPU against CPU: 161 small tensors enqueued, then synchronized."""
    rows = {"cpu": host_split([torch.ones(16) for _ in range(161)], "overhead", args.reps * args.iters, comm),
            "gpu": host_split([torch.ones(16, device="cuda") for _ in range(161)], "overhead", args.reps * args.iters,
                              comm)}
    if me == 0:
        print(f"# host time per 16-element tensor, 161 enqueued then synchronized, np={n}")
        for name, (e, s) in rows.items():
            print(f"{name}: enqueue {e * 1e6:.2f} us, synchronize {s * 1e6:.2f} us")


def staging(args, comm, n, me):
    if me == 0:
        print(f"# MPI staging (HORO_GPU_TRANSPORT={os.environ.get('HORO_GPU_TRANSPORT', 'auto')}) vs CPU tensors, np={n}")
        print(f"{'MiB':>6} {'gpu busbw':>10} {'cpu busbw':>10} {'gpu/cpu':>8}")
    for mib in args.sizes:
        g = torch.full((mib * MiB // 4,), me + 1.0, device="cuda")
        c = torch.full((mib * MiB // 4,), me + 1.0)
        hvd.allreduce_(g, op=hvd.Sum, name="check.gpu")
        check_sum(g, n, f"staged {mib} MiB")
        g.fill_(1.0)
        c.fill_(1.0)
        r = compare({"gpu": lambda: hvd.allreduce_(g, op=hvd.Sum, name="bench.gpu"),
                     "cpu": lambda: hvd.allreduce_(c, op=hvd.Sum, name="bench.cpu")},
                    args.reps, args.iters, comm, timer=host_timed)
        if me == 0:
            gb, cb = busbw(mib * MiB, r["gpu"], n), busbw(mib * MiB, r["cpu"], n)
            print(f"{mib:>6} {gb:>10.2f} {cb:>10.2f} {gb / cb:>8.2f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=("nccl", "resnet50", "overhead", "staging"))
    p.add_argument("--sizes", default=None, help="MiB, comma-separated (nccl: 64,256,1024; staging: 4,16,64)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--iters", type=int, default=10)
    args = p.parse_args()
    args.sizes = [int(s) for s in (args.sizes or ("4,16,64" if args.mode == "staging" else "64,256,1024")).split(",")]
    comm = MPI.COMM_WORLD
    hvd.init()
    if not horo.gpu_available():
        sys.exit(f"no GPU: {horo.gpu_info().cuda_reason}")
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    modes = {"nccl": nccl_sizes, "resnet50": resnet50, "overhead": overhead, "staging": staging}
    modes[args.mode](args, comm, comm.size, comm.rank)
    hvd.shutdown()


if __name__ == "__main__":
    main()
