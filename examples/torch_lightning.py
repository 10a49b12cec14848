"""A small classifier on scikit-learn's digits fitted with Lightning, its DDP strategy running
over the "horo" backend:

    mpirun -np 2 python examples/torch_lightning.py                  # DDPStrategy(process_group_backend="horo")
    mpirun -np 2 python examples/torch_lightning.py --backend gloo   # the same over gloo, to compare

Lightning recognises the MPI launch (its MPIEnvironment, through mpi4py) and runs one
device per rank; `import horo.torch` registers the backend.
"""
import argparse

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.strategies import DDPStrategy
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

import horo.torch  # noqa: F401 - registers the "horo" backend

parser = argparse.ArgumentParser(description="Lightning DDP over horo")
parser.add_argument("--backend", default="horo")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=32, help="per rank")


class DigitsClassifier(L.LightningModule):
    def __init__(self, lr=0.1):
        super().__init__()
        self.lr = lr
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def training_step(self, batch, _index):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def digits_loader(batch_size):
    d = load_digits()
    data = TensorDataset(torch.tensor(d.data / 16.0, dtype=torch.float32), torch.tensor(d.target))
    return DataLoader(data, batch_size=batch_size, shuffle=False)  # Lightning adds a DistributedSampler


def fit(backend, epochs, batch_size, devices):
    """Fits a freshly seeded model; returns (the final epoch's mean training loss, the model)."""
    L.seed_everything(0, verbose=False)
    model = DigitsClassifier()
    trainer = L.Trainer(accelerator="cpu", devices=devices, num_nodes=1, max_epochs=epochs,
                        strategy=DDPStrategy(process_group_backend=backend), logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, digits_loader(batch_size))
    return float(trainer.callback_metrics["train_loss"]), model


def main():
    args = parser.parse_args()
    from mpi4py import MPI

    devices = MPI.COMM_WORLD.Get_size()  # one host: every rank is a device of node 0
    loss, _ = fit(args.backend, args.epochs, args.batch_size, devices)
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(f"final train loss {loss:.4f} over {args.backend} ({devices} ranks, {args.epochs} epochs)", flush=True)


if __name__ == "__main__":
    main()
