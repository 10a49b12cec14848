"""Data-parallel training of a small CNN on scikit-learn's digits (8x8 images, bundled: no download).

    mpirun -np 2 python examples/pytorch_digits.py [--epochs 10] [--checkpoint PATH]

A serial PyTorch script made distributed with horo's handful of lines (marked `# horo:`):
every rank trains on its own shard of the training set, gradients are averaged across
ranks by the DistributedOptimizer, and rank 0 alone prints and writes the checkpoint.
"""
import argparse
import os
import tempfile
import time

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import horo.torch as hvd


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.05, help="for one rank; scaled by the number of ranks")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads per rank (default: the cores divided among this node's ranks)")
    p.add_argument("--sync-bn", action="store_true", help="batch statistics over every rank (hvd.SyncBatchNorm)")
    p.add_argument("--checkpoint", default=os.path.join(tempfile.gettempdir(), "horo-examples", "pytorch_digits.pt"),
                   help="written by rank 0 after the last epoch (default: %(default)s)")
    return p.parse_args()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(16)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = torch.nn.Linear(32 * 4 * 4, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # 8x8 -> 4x4
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def load_data(seed):
    digits = load_digits()
    x = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)  # (1797, 1, 8, 8) in [0, 1]
    y = torch.tensor(digits.target)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    return torch.utils.data.TensorDataset(x_train, y_train), (x_test, y_test)


def main():
    args = parse_args()
    hvd.init()  # horo
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // hvd.local_size()))

    train_set, (x_test, y_test) = load_data(args.seed)
    # horo: each rank reads its own shard (indices rank, rank + size, ... of a shuffled order)
    sampler = torch.utils.data.DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank(),
                                                  shuffle=True, seed=args.seed)
    loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)

    model = Net()
    if args.sync_bn:
        model = hvd.SyncBatchNorm.convert_sync_batchnorm(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)  # horo: lr x size
    # horo: every rank starts from rank 0's weights and optimizer state
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    # horo: gradients averaged over the ranks, communication overlapping backward
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), op=hvd.Average)

    if hvd.rank() == 0:
        print(f"digits: {len(train_set)} training images on {hvd.size()} rank(s) "
              f"({len(sampler)} each), {len(y_test)} test images", flush=True)
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        model.train()
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        total_loss, batches = 0.0, 0
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            total_loss, batches = total_loss + loss.item(), batches + 1
        accuracy = evaluate(model, x_test, y_test)
        loss = hvd.allreduce(torch.tensor(total_loss / batches), name="train_loss", op=hvd.Average).item()  # horo
        if hvd.rank() == 0:
            print(f"epoch {epoch:2d}/{args.epochs}  train loss {loss:.4f}  test accuracy {100 * accuracy:.2f}%",
                  flush=True)

    if hvd.rank() == 0:  # horo: one writer
        os.makedirs(os.path.dirname(os.path.abspath(args.checkpoint)), exist_ok=True)
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": args.epochs,
                    "test_accuracy": accuracy}, args.checkpoint)
        print(f"done in {time.perf_counter() - start:.1f} s; checkpoint written to {args.checkpoint}", flush=True)


def evaluate(model, x_test, y_test):
    """Accuracy on the whole test set: each rank scores its shard, the counts are summed over ranks."""
    model.eval()
    with torch.no_grad():
        x, y = x_test[hvd.rank()::hvd.size()], y_test[hvd.rank()::hvd.size()]
        correct = (model(x).argmax(1) == y).sum()
    counts = hvd.allreduce(torch.tensor([float(correct), float(len(y))]), name="test_accuracy", op=hvd.Sum)  # horo
    return (counts[0] / counts[1]).item()


if __name__ == "__main__":
    main()
