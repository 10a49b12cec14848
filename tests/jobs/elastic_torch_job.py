"""An elastic PyTorch job for tests/test_elastic*.py: linear regression on a fixed dataset, read
through ElasticSampler, trained with DistributedOptimizer, committed every --commit-every steps.

The state carries, besides the model and optimizer, every committed step's global batch (the
dataset indices of all ranks, in rank order): the test replays those batches in one process
and checks the final weights against that reference. Rank 0 writes the result to --result.

Printed lines the tests read:
    rank R: running as pid P on HOST in launch G of size N
    launch G: resuming at epoch E step S of size N
    committed step S                (rank 0, after commit() returned)
    rank R: reset callback at size N
"""
import argparse
import json
import os
import signal
import socket
import time

import torch

import horo.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--dataset", type=int, default=24)
parser.add_argument("--batch", type=int, default=2, help="samples per rank per step")
parser.add_argument("--commit-every", type=int, default=1)
parser.add_argument("--step-seconds", type=float, default=0.0, help="sleep per step, so a test can act mid-job")
parser.add_argument("--die-rank", type=int, help="this rank SIGKILLs itself at --die-step of every launch")
parser.add_argument("--die-step", type=int, default=2)
parser.add_argument("--result", help="rank 0 writes the final state here (JSON)")
args = parser.parse_args()

hvd.init()
generation = int(os.environ.get("HORO_ELASTIC_GENERATION", "0"))
print(f"rank {hvd.rank()}: running as pid {os.getpid()} on {socket.gethostname()} in launch {generation} "
      f"of size {hvd.size()}", flush=True)

data = torch.Generator().manual_seed(1)
features = torch.randn(args.dataset, 4, generator=data)
targets = features @ torch.tensor([[1.5], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(args.dataset, 1, generator=data)
dataset = torch.utils.data.TensorDataset(features, targets, torch.arange(args.dataset))

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                     named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=7)
loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, sampler=sampler)
state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, step=0, batches=[])
state.register_reset_callbacks([lambda: print(f"rank {hvd.rank()}: reset callback at size {hvd.size()}", flush=True)])


@hvd.elastic.run
def train(state):
    if hvd.rank() == 0:
        print(f"launch {generation}: resuming at epoch {state.epoch} step {state.step} of size {hvd.size()}",
              flush=True)
    steps_here = 0
    while state.epoch < args.epochs:
        for x, y, index in loader:
            steps_here += 1
            if hvd.rank() == args.die_rank and steps_here == args.die_step:
                os.kill(os.getpid(), signal.SIGKILL)
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            batch = [i for part in hvd.allgather_object(index.tolist()) for i in part]
            state.batches = state.batches + [batch]
            state.sampler.record_batch(0, args.batch)
            state.step += 1
            time.sleep(args.step_seconds)
            if state.step % args.commit_every == 0:
                state.commit()
                if hvd.rank() == 0:
                    print(f"committed step {state.step}", flush=True)
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)
        state.commit()


train(state)
weights = hvd.allgather_object([p.detach().flatten().tolist() for p in model.parameters()])
if hvd.rank() == 0 and args.result:
    with open(args.result, "w") as f:
        json.dump({"weights": weights[0], "all_equal": all(w == weights[0] for w in weights), "size": hvd.size(),
                   "launch": generation, "steps": state.step, "batches": state.batches}, f)
print(f"rank {hvd.rank()}: done", flush=True)
