"""The digits CNN (examples/pytorch_mnist.py's Net) trained with torch's own
DistributedDataParallel over the "horo" backend: plain torch.distributed code, where
the only horo line is the import that registers the backend.

    mpirun -np 2 python examples/torch_ddp.py                  # DDP over horo
    mpirun -np 2 python examples/torch_ddp.py --backend gloo   # the same over gloo, to compare
    horo-run -np 2 python examples/torch_ddp.py

Under mpirun / horo-run no RANK, WORLD_SIZE or MASTER_ADDR/PORT is needed: horo supplies
them (and rank 0 hosts the TCPStore that gloo uses too).
"""
import argparse
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import horo.torch  # noqa: F401 - registers the "horo" backend (and under MPI, the rendezvous for any backend)

parser = argparse.ArgumentParser(description="digits CNN with DDP over horo")
parser.add_argument("--backend", default="horo", help="torch.distributed backend: horo (default) or gloo")
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch-size", type=int, default=32, help="per rank")
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--seed", type=int, default=42)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


def digits(seed):
    """scikit-learn's 8x8 digits upsampled to 28x28 (no download); (train, test) datasets."""
    d = load_digits()
    x = F.interpolate(torch.tensor(d.images / 16.0, dtype=torch.float32).unsqueeze(1), size=(28, 28),
                      mode="bilinear", align_corners=False)
    y = torch.tensor(d.target)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    x, y = x[order], y[order]
    cut = int(0.8 * len(y))
    return TensorDataset(x[:cut], y[:cut]), TensorDataset(x[cut:], y[cut:])


def main():
    args = parser.parse_args()
    dist.init_process_group(args.backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)  # the same initial weights everywhere (DDP also broadcasts rank 0's)

    train_set, test_set = digits(args.seed)
    sampler = DistributedSampler(train_set, num_replicas=size, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.5)

    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        model.train()
        total, count = torch.zeros(2), 0
        for x, y in loader:
            opt.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()  # DDP allreduces the gradient buckets over the backend as autograd produces them
            opt.step()
            total += torch.tensor([loss.item() * len(y), len(y)])
        dist.all_reduce(total)
        model.eval()
        with torch.no_grad():
            xt, yt = test_set.tensors
            correct = torch.tensor([(model(xt).argmax(1) == yt).sum().item()], dtype=torch.float64)
        if rank == 0:
            print(f"epoch {epoch}/{args.epochs}  train loss {total[0] / total[1]:.4f}  "
                  f"test accuracy {100.0 * correct.item() / len(yt):.1f}%  [{args.backend}, {size} ranks]", flush=True)
    if rank == 0:
        print(f"trained in {time.perf_counter() - start:.2f}s over {args.backend}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
