"""Data-parallel Keras 3 training with horo: scikit-learn's handwritten digits (bundled, no download).

    mpirun -np 2 python examples/keras_digits.py [--epochs 12] [--save model.keras]
    python examples/keras_digits.py                      # one process works too

The serial script becomes a distributed one with the lines marked `# horo`: each rank
trains on its own shard of the training set, the DistributedOptimizer averages the
gradients of every step across ranks, rank 0's initial weights are broadcast, epoch
metrics are averaged over ranks, and the learning rate (scaled by the number of ranks,
since the global batch is size x larger) warms up over the first epochs.
"""
import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import horo.tensorflow.keras as hvd  # noqa: E402  # horo


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.01, help="single-rank learning rate (scaled by the rank count)")
    p.add_argument("--warmup-epochs", type=int, default=2)
    p.add_argument("--save", metavar="PATH", help="where rank 0 saves the model (default: a temporary folder)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main():
    args = parse_args()
    hvd.init()  # horo
    rank, size = hvd.rank(), hvd.size()
    keras.utils.set_random_seed(args.seed + rank)  # different initial weights per rank: the broadcast fixes it

    digits = load_digits()
    x = (digits.data / 16.0).astype("float32")
    y = digits.target.astype("int32")
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=args.seed, stratify=y)
    x_train, y_train = x_train[rank::size], y_train[rank::size]  # horo: this rank's shard
    # Ranks must take the same number of steps (every step is an allreduce): cut to the smallest shard.
    steps = (len(digits.data) - len(x_test)) // size // args.batch_size
    x_train, y_train = x_train[: steps * args.batch_size], y_train[: steps * args.batch_size]

    model = keras.Sequential([
        keras.Input((64,)),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    lr = args.lr * size  # horo: the global batch is size x larger
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(lr, momentum=0.9))  # horo
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])

    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),  # horo: everyone starts from rank 0's weights
        hvd.callbacks.MetricAverageCallback(),  # horo: logs averaged over ranks
        hvd.callbacks.LearningRateWarmupCallback(lr, warmup_epochs=args.warmup_epochs, verbose=1 if rank == 0 else 0),
    ]
    t0 = time.perf_counter()
    model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs, callbacks=callbacks,
              verbose=2 if rank == 0 else 0)  # horo: print on rank 0 only
    seconds = time.perf_counter() - t0

    # Every rank holds the same weights; each scores the whole test set (small), rank 0 reports.
    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    same = hvd.allgather_object(float(accuracy))
    if rank == 0:
        print(f"ranks: {size}  train rows per rank: {len(x_train)}  epochs: {args.epochs}  "
              f"fit: {seconds:.1f} s")
        print(f"test accuracy: {accuracy:.4f}  (test loss {loss:.4f}; same on every rank: {len(set(same)) == 1})")
        path = args.save or os.path.join(tempfile.mkdtemp(prefix="horo-keras-digits-"), "digits.keras")
        model.save(path)  # reload with hvd.load_model(path) to continue training distributed
        print(f"model saved to {path}")
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
