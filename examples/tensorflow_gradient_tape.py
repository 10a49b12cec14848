"""A custom TensorFlow 2 training loop made data-parallel with horo.tensorflow.

    mpirun -np 2 python examples/tensorflow_gradient_tape.py

Horovod's recipe, with only the import changed: each rank trains on its shard of
scikit-learn's bundled digits (8x8 images, no download), DistributedGradientTape
averages the gradients across ranks, and the first step ends with a broadcast of
rank 0's weights (and optimizer state, created by that step) so every rank agrees.
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import horo.tensorflow as hvd  # noqa: E402


def load_shard(rank, size, seed=0):
    """This rank's share of a fixed shuffle of the digits, and a held-out test set."""
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    x_test, y_test, x_train, y_train = x[:300], y[:300], x[300:], y[300:]
    return (x_train[rank::size], y_train[rank::size]), (x_test, y_test)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.01, help="scaled by the number of ranks")
    args = parser.parse_args()

    hvd.init()
    (x_train, y_train), (x_test, y_test) = load_shard(hvd.rank(), hvd.size())

    keras.utils.set_random_seed(1234 + hvd.rank())  # different starts: the broadcast makes them agree
    model = keras.Sequential([
        keras.Input((64,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # Horovod's advice: scale the learning rate by the number of ranks (the global batch grows with it).
    opt = keras.optimizers.Adam(args.lr * hvd.size())

    @tf.function
    def train_step(images, labels, first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        # After the first step, not before: the optimizer creates its variables in it.
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)
        return loss

    # Every rank must run the same number of steps (each step is a collective).
    steps = int(hvd.allreduce(tf.constant(len(x_train) // args.batch_size), op=hvd.Min))
    for epoch in range(args.epochs):
        order = np.random.default_rng(epoch).permutation(len(x_train))
        losses = []
        for step in range(steps):
            batch = order[step * args.batch_size : (step + 1) * args.batch_size]
            losses.append(train_step(x_train[batch], y_train[batch], epoch == 0 and step == 0))
        # Average the epoch's loss and the test accuracy over ranks (each rank holds its own value).
        loss = float(hvd.allreduce(tf.reduce_mean(losses), name="epoch_loss"))
        accuracy = np.mean(np.argmax(model(x_test), axis=1) == y_test)
        accuracy = float(hvd.allreduce(tf.constant(accuracy), name="test_accuracy"))
        if hvd.rank() == 0:
            print(f"epoch {epoch + 1}/{args.epochs}: loss {loss:.4f}, test accuracy {accuracy:.3f}", flush=True)

    # The weights are identical on every rank: check it the cheap way.
    checksum = tf.add_n([tf.reduce_sum(tf.cast(v, tf.float64)) for v in model.trainable_variables])
    spread = float(hvd.allreduce(checksum, op=hvd.Max) - hvd.allreduce(checksum, op=hvd.Min))
    if hvd.rank() == 0:
        print(f"ranks: {hvd.size()}, weights identical on every rank: {spread == 0.0}", flush=True)


if __name__ == "__main__":
    main()
