"""Timeline overhead: allreduce step time with the timeline recording vs off, in one run.

    mpirun -np 2 python benchmarks/timeline_overhead.py [--resnet] [--reps 9] [--json out.json]

Workloads: (1) 64 small allreduces (1024 float32 each, fixed names) enqueued async, then all
synchronised; (2) with --resnet, ResNet-50's 161 gradients (horo.bench.models), likewise.
Variants, interleaved block by block in rotating order: "off", and "on" = horo.start_timeline()
(rank 0 writes; started before the block's barrier, stopped after its timing, so neither is timed).
Reports the median over reps of the slowest rank's time per step, the overhead (on/off - 1) and the
paired overhead (median over reps of the same ratio within a rep, which cancels slow bursts).
"""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


def main():
    p = C.base_parser(__doc__.splitlines()[0], reps=9, warmup=5, target_s=0.5)
    p.add_argument("--resnet", action="store_true", help="also ResNet-50's gradient set (slow on a busy machine)")
    args = C.finish_args(p.parse_args())
    ctx = C.setup(args)
    horo, comm, n = ctx.horo, ctx.comm, ctx.size
    if horo is None:
        C.fail(ctx, f"horo is needed: {ctx.horo_error}")
    C.header(ctx, "timeline overhead")
    from horo.bench.models import RESNET50_SHAPES

    workloads = {"64 x 4 KiB": [(1024,)] * 64}
    if args.resnet:
        workloads["ResNet-50 (161 tensors)"] = RESNET50_SHAPES
    tmp = tempfile.mkdtemp(prefix="horo-timeline-overhead-")
    rows, results = [], {}
    for wname, shapes in workloads.items():
        grads = [np.zeros(s, dtype=np.float32) for s in shapes]
        names = [f"overhead.{len(shapes)}.{i}" for i in range(len(grads))]

        def step():
            handles = [horo.allreduce_async_(g, name=nm, op=horo.Sum) for g, nm in zip(grads, names)]
            for h in handles:
                horo.synchronize(h)

        for _ in range(args.warmup):
            step()
        iters = args.iters or C.calibrate_iters(comm, [step], args.target_s)
        samples = {"off": [], "on": []}
        events = 0
        for r in range(args.reps):
            for variant in (["off", "on"] if r % 2 == 0 else ["on", "off"]):
                path = os.path.join(tmp, f"timeline.{r}.json")
                if variant == "on":
                    horo.start_timeline(path)
                samples[variant].append(C.time_block(comm, step, iters))
                if variant == "on":
                    horo.stop_timeline()
                    if ctx.rank == 0:
                        import json

                        with open(path) as f:
                            events = len(json.load(f))  # also proves it parses
                        os.remove(path)
        off, on = C.median(samples["off"]), C.median(samples["on"])
        paired = C.paired_ratio(samples["on"], samples["off"])
        results[wname] = {"off_s": off, "on_s": on, "overhead_pct": (on / off - 1) * 100,
                          "paired_overhead_pct": (paired - 1) * 100, "samples": samples,
                          "steps_per_block": iters, "events_per_block": events}
        rows.append([wname, f"{off * 1e6:.0f}", f"{on * 1e6:.0f}", f"{(on / off - 1) * 100:+.1f}",
                     f"{(paired - 1) * 100:+.1f}", f"{C.spread(samples['off']):.0f}", str(iters), str(events)])
    if ctx.rank == 0:
        ctx.console.table(f"timeline overhead, np={n}, {args.reps} reps",
                          ["workload", "off us/step", "on us/step", "overhead %", "paired %", "noise %",
                           "steps/block", "events/block"], rows,
                          ["median over reps of the slowest rank's time per step; paired = median over reps of "
                           "on/off within a rep."])
    C.write_json(ctx, args.json, {"meta": C.meta(ctx, "timeline_overhead"), "results": results})
    ctx.finalize()


if __name__ == "__main__":
    main()
