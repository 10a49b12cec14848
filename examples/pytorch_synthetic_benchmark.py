"""Training throughput on synthetic data, like Horovod's pytorch_synthetic_benchmark.py.

    mpirun -np 2 python examples/pytorch_synthetic_benchmark.py [--model mlp] [--fp16-allreduce]

Prints images/sec per rank and in total (mean +- 1.96 std over --num-iters timed iterations),
then the same loop in one process without communication (rank 0 alone, same threads, while the
others wait), so the scaling efficiency is visible: total / (ranks x one process).
The default model is a 4-layer MLP (3072-2560-2560-2560-10, 21.0 M parameters) on 3072-float
inputs; with torchvision installed, --model takes any torchvision.models name (resnet50, ...)
on 3x224x224 images. For horo vs torch DDP in one run, see benchmarks/pytorch_ddp_throughput.py.
"""
import argparse
import os
import timeit

import numpy as np
import torch
import torch.nn.functional as F

import horo.torch as hvd

MLP_DIMS = (3072, 2560, 2560, 2560, 10)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mlp", help="mlp, or a torchvision.models name if torchvision is installed")
    p.add_argument("--batch-size", type=int, default=32, help="input batch size per rank")
    p.add_argument("--num-warmup-batches", type=int, default=5, help="batches before timing starts")
    p.add_argument("--num-batches-per-iter", type=int, default=5, help="batches per timed iteration")
    p.add_argument("--num-iters", type=int, default=5, help="timed iterations")
    p.add_argument("--fp16-allreduce", action="store_true", help="compress gradients to float16 for the allreduce")
    p.add_argument("--no-single", action="store_true", help="skip the one-process comparison")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads per rank (default: the cores divided among this node's ranks)")
    return p.parse_args()


def build_model(name):
    if name == "mlp":
        layers = []
        for a, b in zip(MLP_DIMS[:-1], MLP_DIMS[1:]):
            layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
        return torch.nn.Sequential(*layers[:-1]), (MLP_DIMS[0],), MLP_DIMS[-1]
    try:
        from torchvision import models
    except ImportError:
        raise SystemExit(f"--model {name} needs torchvision (not installed); the default --model mlp does not")
    return getattr(models, name)(), (3, 224, 224), 1000


def log(text):
    if hvd.rank() == 0:
        print(text, flush=True)


def main():
    args = parse_args()
    hvd.init()
    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // hvd.local_size()))
    torch.manual_seed(42)

    model, input_shape, classes = build_model(args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression, op=hvd.Average)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, *input_shape)
    target = torch.randint(0, classes, (args.batch_size,))

    def step_of(model, optimizer):
        def benchmark_step():
            optimizer.zero_grad()
            F.cross_entropy(model(data), target).backward()
            optimizer.step()

        return benchmark_step

    benchmark_step = step_of(model, optimizer)

    params = sum(p.numel() for p in model.parameters())
    log(f"Model: {args.model} ({params / 1e6:.1f} M parameters)")
    log(f"Batch size: {args.batch_size} per rank, {torch.get_num_threads()} torch thread(s) per rank")
    log(f"Number of ranks: {hvd.size()}{', fp16 allreduce' if args.fp16_allreduce else ''}")

    log("Running warmup...")
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)

    log("Running benchmark...")
    img_secs = []
    for i in range(args.num_iters):
        seconds = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / seconds
        log(f"Iter #{i}: {img_sec:.1f} img/sec per rank")
        img_secs.append(img_sec)

    mean, conf = np.mean(img_secs), 1.96 * np.std(img_secs)
    log(f"Img/sec per rank: {mean:.1f} +-{conf:.1f}")
    log(f"Total img/sec on {hvd.size()} rank(s): {hvd.size() * mean:.1f} +-{hvd.size() * conf:.1f}")
    if not args.no_single:
        single_process_comparison(args, build_model, step_of, hvd.size() * mean)


def single_process_comparison(args, build_model, step_of, total):
    """Rank 0 runs the same loop with a plain optimizer while the other ranks wait at a barrier."""
    if hvd.rank() == 0:
        torch.manual_seed(42)
        model = build_model(args.model)[0]
        step = step_of(model, torch.optim.SGD(model.parameters(), lr=0.01))
        timeit.timeit(step, number=args.num_warmup_batches)
        rates = [args.batch_size * args.num_batches_per_iter / timeit.timeit(step, number=args.num_batches_per_iter)
                 for _ in range(args.num_iters)]
        single = float(np.median(rates))
        log(f"Img/sec with 1 process (same loop, no communication): {single:.1f}")
        log(f"Scaling efficiency on {hvd.size()} rank(s): {100.0 * total / (hvd.size() * single):.0f}% "
            f"({total:.1f} / ({hvd.size()} x {single:.1f}))")
    hvd.barrier()


if __name__ == "__main__":
    main()
