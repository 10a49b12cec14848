"""Pipeline parallelism with torch.distributed.pipelining over the "horo" backend: an MLP on
scikit-learn's digits split into 2 or 4 stages, one stage per rank, trained with GPipe or
1F1B over micro-batches. With ranks = stages x replicas, each replica is a pipeline on its
own process-set group and every stage averages its gradients with the same stage of the
other replicas (data parallelism across process sets).

    mpirun -np 2 python examples/torch_pipeline.py                       # 2 stages, GPipe
    mpirun -np 4 python examples/torch_pipeline.py --schedule 1f1b      # 4 stages
    mpirun -np 4 python examples/torch_pipeline.py --stages 2           # 2 stages x 2 replicas

Stage activations move between ranks with horo's point-to-point (one horo batch per
batch_isend_irecv); the gradient averaging is a horo allreduce on a process set.
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

import horo.torch  # noqa: F401 - registers the "horo" backend

parser = argparse.ArgumentParser(description="GPipe / 1F1B over horo")
parser.add_argument("--stages", type=int, default=None, help="pipeline stages (default: every rank a stage)")
parser.add_argument("--schedule", choices=["gpipe", "1f1b"], default="gpipe")
parser.add_argument("--microbatches", type=int, default=4)
parser.add_argument("--batch-size", type=int, default=64, help="per replica, split into micro-batches")
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--width", type=int, default=128)
BLOCKS = 4  # hidden blocks, split evenly among the stages


def whole_model(width):
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(64 if i == 0 else width, width), nn.ReLU()) for i in range(BLOCKS)]
    return nn.Sequential(*blocks, nn.Linear(width, 10))


def stage_module(model, stage, stages):
    layers = list(model)
    per = BLOCKS // stages
    mine = layers[stage * per:(stage + 1) * per]
    return nn.Sequential(*(mine + [layers[-1]] if stage == stages - 1 else mine))


def main():
    args = parser.parse_args()
    dist.init_process_group("horo")
    rank, size = dist.get_rank(), dist.get_world_size()
    stages = args.stages or size
    if BLOCKS % stages or size % stages:
        raise SystemExit(f"{size} ranks cannot run {stages} stages of {BLOCKS} blocks (stages must divide both)")
    replicas = size // stages
    replica, stage = divmod(rank, stages)
    # Every rank creates every group, in the same order (torch's rule; horo adds a process set for each).
    pipelines = [dist.new_group(list(range(r * stages, (r + 1) * stages))) for r in range(replicas)]
    same_stage = [dist.new_group(list(range(s, size, stages))) for s in range(stages)] if replicas > 1 else None

    digits = load_digits()
    x_all = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y_all = torch.tensor(digits.target)
    module = stage_module(whole_model(args.width), stage, stages)
    opt = torch.optim.SGD(module.parameters(), lr=args.lr, momentum=0.9)
    pipe = PipelineStage(module, stage, stages, torch.device("cpu"), group=pipelines[replica])
    schedule_class = ScheduleGPipe if args.schedule == "gpipe" else Schedule1F1B
    schedule = schedule_class(pipe, n_microbatches=args.microbatches, loss_fn=F.cross_entropy)

    global_batch = args.batch_size * replicas
    steps = len(y_all) // global_batch
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(y_all), generator=torch.Generator().manual_seed(epoch))
        epoch_loss = torch.zeros(2)
        for step in range(steps):
            rows = order[step * global_batch:(step + 1) * global_batch][replica * args.batch_size:][:args.batch_size]
            x, y = x_all[rows], y_all[rows]
            opt.zero_grad()
            losses = []
            if stage == 0:
                schedule.step(x)
            elif stage == stages - 1:
                schedule.step(target=y, losses=losses)
            else:
                schedule.step()
            if same_stage is not None:
                for p in module.parameters():
                    dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=same_stage[stage])
            opt.step()
            if losses:
                epoch_loss += torch.tensor([torch.stack(losses).mean().item(), 1.0])
        dist.all_reduce(epoch_loss)  # only the last stages contribute
        if rank == 0:
            print(f"epoch {epoch}/{args.epochs}  loss {epoch_loss[0] / epoch_loss[1]:.4f}  "
                  f"[{args.schedule}, {stages} stages x {replicas} replicas, {args.microbatches} micro-batches]",
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
