"""Point-to-point ping-pong between ranks 0 and 1: horo (through the "horo" torch.distributed
backend, and horo.torch's own send/recv) vs mpi4py's Send/Recv vs gloo's send/recv, in one run.

    mpirun -np 2 --bind-to none python benchmarks/torch_p2p_pingpong.py [--quick] [--sizes 4B,64K,1M,16M,256M]

One call = rank 0 sends n bytes to rank 1, which sends them back; the figure is half the
round trip (latency, us) and n / half-round-trip (bandwidth, GB/s); medians over the reps.
Targets (issue #52): horo >= 1.0x MPI from 64 KiB, latency <= 2x MPI.
"""
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


def main():
    p = C.base_parser(__doc__.splitlines()[0], reps=5, warmup=3)
    p.add_argument("--sizes", default=None, help="bytes (default 4B,4K,64K,1M,16M,256M; quick 4B,64K,1M,16M)")
    args = C.finish_args(p.parse_args())
    sizes = C.parse_sizes(args.sizes or ("4B,64K,1M,16M" if args.quick else "4B,4K,64K,1M,16M,256M"))
    ctx = C.setup(args, need_horo=False)
    comm, rank, size = ctx.comm, ctx.rank, ctx.size
    if size != 2:
        C.fail(ctx, "ping-pong runs at np=2")
    import torch
    import torch.distributed as dist

    import horo.torch as hvd

    hvd.init()
    ctx.horo = hvd
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = comm.bcast(s.getsockname()[1] if rank == 0 else None, root=0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
    horo_group = dist.new_group(backend="horo")
    peer = 1 - rank
    C.header(ctx, "ping-pong, ranks 0 <-> 1")

    def pingpong(send, recv):
        def call():
            if rank == 0:
                send()
                recv()
            else:
                recv()
                send()
        return call

    rows, results = [], {}
    for nbytes in sizes:
        t = torch.zeros(nbytes, dtype=torch.uint8)
        a = t.numpy()
        variants = {
            "horo c10d": pingpong(lambda: dist.send(t, peer, group=horo_group), lambda: dist.recv(t, peer, group=horo_group)),
            "horo.torch": pingpong(lambda: hvd.send(t, peer), lambda: hvd.recv(t, peer)),
            "mpi4py": pingpong(lambda: comm.Send(a, dest=peer), lambda: comm.Recv(a, source=peer)),
            "gloo c10d": pingpong(lambda: dist.send(t, peer), lambda: dist.recv(t, peer)),
        }
        samples, iters = C.interleaved(comm, variants, args.reps, args.warmup, args.iters,
                                       target_s=0.05 if args.quick else 0.2)
        half = {k: C.median(v) / 2 for k, v in samples.items()}
        vs = {k: C.paired_ratio(samples[k], samples["horo c10d"]) for k in ("mpi4py", "gloo c10d", "horo.torch")}
        rows.append([C.fmt_bytes(nbytes)] + [f"{half[k] * 1e6:.1f}" for k in variants] +
                    [f"{nbytes / half['horo c10d'] / 1e9:.2f}"] + [C.fmt_ratio(vs[k]) for k in vs])
        results[nbytes] = {"half_round_trip_s": half, "horo_c10d_speedup": vs, "iters": iters}
    if ctx.console:
        ctx.console.table("ping-pong, half round trip in us", ["size", "horo c10d", "horo.torch", "mpi4py", "gloo c10d",
                                                               "horo c10d GB/s", "vs mpi4py", "vs gloo", "vs horo.torch"],
                          rows, ["speedup = other's time / horo c10d's (paired per rep); targets: vs mpi4py >= 1.0x "
                                 "from 64 KiB, latency <= 2x mpi4py's"])
    C.write_json(ctx, args.json, {"meta": C.meta(ctx, "torch_p2p_pingpong.py"), "results": results})
    dist.destroy_process_group()
    ctx.finalize()


if __name__ == "__main__":
    main()
