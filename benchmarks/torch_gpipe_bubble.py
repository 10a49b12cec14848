"""GPipe's pipeline bubble on the "horo" backend: p stages of equal compute, m micro-batches;
the measured bubble (time - ideal) / time against the theory (p - 1) / (m + p - 1).

    mpirun -np 2 --bind-to none python benchmarks/torch_gpipe_bubble.py [--micro 1,2,4,8,16]
    mpirun -np 4 --bind-to none python benchmarks/torch_gpipe_bubble.py

Each stage is the same stack of Linear layers; `ideal` is the step's compute alone: m
micro-batches' forward and backward through one stage, timed on its own on every rank
(the stages run in parallel, so a perfect pipeline would take that long). A step is a
ScheduleGPipe.step() on a batch of m micro-batches of --rows rows; medians over the reps.
Target (issue #52): the measured bubble within 10% (relative) of (p - 1) / (m + p - 1).
Needs a free core per stage: `ideal` times every stage computing at once, which on fewer cores
than stages (or a loaded machine) is slower than the staggered pipeline and the figure is void.
"""
import os
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


def main():
    p = C.base_parser(__doc__.splitlines()[0], reps=5, warmup=2)
    p.add_argument("--micro", default="1,2,4,8,16", help="micro-batch counts (quick: 1,4,16)")
    p.add_argument("--rows", type=int, default=32, help="rows per micro-batch")
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--layers", type=int, default=4, help="Linear layers per stage")
    args = C.finish_args(p.parse_args())
    micro = [int(m) for m in ("1,4,16" if args.quick and args.micro == "1,2,4,8,16" else args.micro).split(",")]
    ctx = C.setup(args, need_horo=False)
    comm, rank, stages = ctx.comm, ctx.rank, ctx.size
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    import horo.torch as hvd

    torch.set_num_threads(1)
    dist.init_process_group("horo")
    ctx.horo = hvd
    C.header(ctx, f"GPipe, {stages} stages x {args.layers} Linear({args.width}), {args.rows} rows per micro-batch")
    torch.manual_seed(rank)
    module = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(args.width, args.width), torch.nn.Tanh())
                                   for _ in range(args.layers)])

    rows, results = [], {}
    for m in micro:
        x = torch.randn(m * args.rows, args.width)
        y = torch.randn(m * args.rows, args.width)
        stage = PipelineStage(module, rank, stages, torch.device("cpu"))
        schedule = ScheduleGPipe(stage, n_microbatches=m, loss_fn=F.mse_loss)

        def step():
            if rank == 0:
                schedule.step(x)
            elif rank == stages - 1:
                schedule.step(target=y)
            else:
                schedule.step()

        def compute_alone():
            # One stage's work for the whole step, no communication: the ideal pipeline's time.
            for xm in x.chunk(m):
                module(xm).square().mean().backward()

        samples, _ = C.interleaved(comm, {"pipeline": step, "compute": compute_alone}, args.reps, args.warmup,
                                   iters=2 if args.quick else 5)
        t, ideal = C.median(samples["pipeline"]), C.median(samples["compute"])
        bubble = (t - ideal) / t
        theory = (stages - 1) / (m + stages - 1)
        rel = abs(bubble - theory) / theory if theory else float("nan")
        rows.append([str(m), f"{t * 1e3:.1f}", f"{ideal * 1e3:.1f}", f"{bubble:.3f}", f"{theory:.3f}",
                     f"{100 * rel:.0f}%", C.verdict(rel <= 0.10)])
        results[m] = {"step_s": t, "ideal_s": ideal, "bubble": bubble, "theory": theory}
        module.zero_grad()
    if ctx.console:
        ctx.console.table(f"GPipe bubble, p={stages}", ["micro-batches", "step ms", "ideal ms", "bubble",
                                                         "(p-1)/(m+p-1)", "off by", "within 10%"], rows,
                          ["bubble = (step - ideal) / step; ideal = one stage's compute for the step, alone"])
    C.write_json(ctx, args.json, {"meta": C.meta(ctx, "torch_gpipe_bubble.py"), "results": results})
    dist.destroy_process_group()
    ctx.finalize()


if __name__ == "__main__":
    main()
