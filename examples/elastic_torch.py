"""Elastic data-parallel training of a small CNN on scikit-learn's digits: the job goes on when ranks
or hosts fail and grows when hosts join (Horovod's elastic API; see docs/elastic.md).

    echo localhost:2 > hosts.txt
    horo-run -np 2 --min-np 1 --max-np 4 --host-discovery-script "cat hosts.txt" \\
        python examples/elastic_torch.py [--epochs 6] [--batches-per-commit 5]

Kill a rank (`kill -9 PID`): the others go back to the last commit and carry on. Add a line
`127.0.0.1:2` to hosts.txt: the job grows to 4 ranks at the next commit. Lines marked `# elastic:`
are what elastic training adds to a horo script.
"""
import argparse
import os
import time

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import horo.torch as hvd


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.05, help="for one rank; scaled by the number of ranks")
    p.add_argument("--batches-per-commit", type=int, default=5)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--step-seconds", type=float, default=0.0, help="extra time per step (to watch a fault happen)")
    return p.parse_args()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = torch.nn.Linear(32 * 4 * 4, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # 8x8 -> 4x4
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def load_data(seed):
    digits = load_digits()
    x = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(digits.target)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    return torch.utils.data.TensorDataset(x_train, y_train), (x_test, y_test)


def evaluate(model, x_test, y_test):
    model.eval()
    with torch.no_grad():
        x, y = x_test[hvd.rank()::hvd.size()], y_test[hvd.rank()::hvd.size()]
        correct = (model(x).argmax(1) == y).sum()
    counts = hvd.allreduce(torch.tensor([float(correct), float(len(y))]), name="test_accuracy", op=hvd.Sum)
    return (counts[0] / counts[1]).item()


def main():
    args = parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))
    train_set, (x_test, y_test) = load_data(args.seed)

    # elastic: a sampler that re-shards what is left of the epoch when the ranks change
    sampler = hvd.elastic.ElasticSampler(train_set, shuffle=True, seed=args.seed)
    loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    model = Net()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9),
                                         named_parameters=model.named_parameters())

    # elastic: everything a relaunch must resume from; no broadcast_parameters: elastic.run synchronises
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)

    def on_reset():  # elastic: after a reset the job may have another size
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()
        if hvd.rank() == 0:
            print(f"reset: now {hvd.size()} ranks, resuming epoch {state.epoch + 1} at batch {state.batch}", flush=True)

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run  # elastic: retried from the last commit when ranks fail or hosts change
    def train(state):
        while state.epoch < args.epochs:
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
                time.sleep(args.step_seconds)
                state.batch += 1
                state.sampler.record_batch(state.batch, args.batch_size)
                if state.batch % args.batches_per_commit == 0:
                    state.commit()  # elastic: the point to go back to; also where new hosts join
            accuracy = evaluate(model, x_test, y_test)
            if hvd.rank() == 0:
                print(f"epoch {state.epoch + 1}/{args.epochs}  test accuracy {100 * accuracy:.2f}%  "
                      f"on {hvd.size()} ranks", flush=True)
            state.epoch, state.batch = state.epoch + 1, 0
            state.sampler.set_epoch(state.epoch)
            state.commit()
        return accuracy

    accuracy = train(state)
    if hvd.rank() == 0:
        print(f"final test accuracy {100 * accuracy:.2f}% on {hvd.size()} ranks", flush=True)


if __name__ == "__main__":
    main()
