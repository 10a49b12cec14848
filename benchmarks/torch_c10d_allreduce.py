"""all_reduce through torch.distributed: the "horo" backend vs gloo vs mpi4py's MPI_Allreduce,
and vs horo's native API (how thin the Python process-group layer is), in one run.

    mpirun -np 2 --bind-to none python benchmarks/torch_c10d_allreduce.py [--quick] [--sizes 4K,64K,1M,16M,256M]

Variants, interleaved rep by rep on the same float32 tensor (sum, in place):
  horo c10d   dist.all_reduce(t, group=<a "horo" group>)
  gloo c10d   dist.all_reduce(t, group=<the gloo default group>)
  mpi4py      comm.Allreduce(MPI.IN_PLACE, t.numpy())
  horo native horo.torch.allreduce_(t, op=Sum)
Figures: latency (us, median of the reps) and bus bandwidth (GB/s, nccl-tests' 2(n-1)/n).
Targets (issue #52): horo c10d >= gloo at every size, and >= 0.9x horo native.
"""
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


def main():
    p = C.base_parser(__doc__.splitlines()[0], reps=5, warmup=3)
    p.add_argument("--sizes", default=None, help="message sizes (default 4K,64K,1M,16M,256M; quick 4K,64K,1M,16M)")
    args = C.finish_args(p.parse_args())
    sizes = C.parse_sizes(args.sizes or ("4K,64K,1M,16M" if args.quick else "4K,64K,1M,16M,256M"))
    ctx = C.setup(args, need_horo=False)
    comm, rank, size = ctx.comm, ctx.rank, ctx.size
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    import horo.torch as hvd

    hvd.init()
    ctx.horo = hvd
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = comm.bcast(s.getsockname()[1] if rank == 0 else None, root=0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
    horo_group = dist.new_group(backend="horo")
    C.header(ctx, f"all_reduce float32 sum, in place, np={size}")

    rows, results = [], {}
    for nbytes in sizes:
        t = torch.ones(nbytes // 4)
        a = t.numpy()
        variants = {
            "horo c10d": lambda: dist.all_reduce(t, group=horo_group),
            "gloo c10d": lambda: dist.all_reduce(t),
            "mpi4py": lambda: comm.Allreduce(MPI.IN_PLACE, a),
            "horo native": lambda: hvd.allreduce_(t, op=hvd.Sum),
        }
        target = 0.05 if args.quick else 0.2
        samples, iters = C.interleaved(comm, variants, args.reps, args.warmup, args.iters, target_s=target)
        t.fill_(1.0)
        med = {k: C.median(v) for k, v in samples.items()}
        vs = {k: C.paired_ratio(samples[k], samples["horo c10d"]) for k in ("gloo c10d", "mpi4py", "horo native")}
        rows.append([C.fmt_bytes(nbytes)] + [f"{med[k] * 1e6:.1f}" for k in variants] +
                    [f"{C.busbw_gbs(nbytes, med['horo c10d'], size):.2f}"] + [C.fmt_ratio(vs[k]) for k in vs])
        results[nbytes] = {"median_s": med, "horo_c10d_speedup": vs, "iters": iters}
    notes = ["us per call (median over reps); busbw of horo c10d; speedup = other's time / horo c10d's (paired per rep)",
             "targets: vs gloo >= 1.0x at every size; vs horo native >= 0.9x"]
    if ctx.console:
        ctx.console.table(f"all_reduce through torch.distributed, np={size}",
                          ["size", "horo c10d", "gloo c10d", "mpi4py", "horo native", "busbw GB/s",
                           "vs gloo", "vs mpi4py", "vs native"], rows, notes)
    C.write_json(ctx, args.json, {"meta": C.meta(ctx, "torch_c10d_allreduce.py"), "results": results})
    dist.destroy_process_group()
    ctx.finalize()


if __name__ == "__main__":
    main()
