"""An elastic Keras 3 job for tests/test_elastic.py: a small regression model trained with
model.fit, KerasState and the three elastic callbacks, committing every batch. Each rank reads
its shard of a fixed dataset (x[rank::size]), so a relaunch at another size re-shards it.

Printed lines the tests read (as in elastic_torch_job.py):
    rank R: running as pid P on HOST in launch G of size N
    launch G: resuming at epoch E batch B of size N
    committed epoch E batch B       (rank 0, from a callback after CommitStateCallback)
Rank 0 writes --result: the weights on every rank, the final epoch, the launch and its size.
"""
import argparse
import json
import os
import socket
import time

import keras
import numpy as np

import horo.tensorflow.keras as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps", type=int, default=4, help="steps per epoch")
parser.add_argument("--step-seconds", type=float, default=0.0)
parser.add_argument("--result")
args = parser.parse_args()

hvd.init()
generation = int(os.environ.get("HORO_ELASTIC_GENERATION", "0"))
print(f"rank {hvd.rank()}: running as pid {os.getpid()} on {socket.gethostname()} in launch {generation} "
      f"of size {hvd.size()}", flush=True)

rng = np.random.default_rng(1)
x = rng.standard_normal((96, 4)).astype("float32")
y = x @ np.array([[1.5], [-2.0], [0.5], [3.0]], dtype="float32")
x_mine, y_mine = x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9)), loss="mse")
state = hvd.elastic.KerasState(model, batch=0, epoch=0)


class Report(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(args.step_seconds)
        if hvd.rank() == 0:
            print(f"committed epoch {state.epoch} batch {state.batch}", flush=True)


callbacks = [hvd.elastic.UpdateEpochStateCallback(state), hvd.elastic.UpdateBatchStateCallback(state),
             hvd.elastic.CommitStateCallback(state, batches_per_commit=1), Report()]


@hvd.elastic.run
def train(state):
    if hvd.rank() == 0:
        print(f"launch {generation}: resuming at epoch {state.epoch} batch {state.batch} of size {hvd.size()}",
              flush=True)
    batch_size = len(x_mine) // args.steps
    state.model.fit(x_mine, y_mine, batch_size=batch_size, steps_per_epoch=args.steps,
                    epochs=args.epochs - state.epoch, callbacks=callbacks, verbose=0, shuffle=False)


train(state)
weights = hvd.allgather_object([w.tolist() for w in model.get_weights()])
if hvd.rank() == 0 and args.result:
    with open(args.result, "w") as f:
        json.dump({"weights": weights[0], "all_equal": all(w == weights[0] for w in weights), "size": hvd.size(),
                   "launch": generation, "epoch": state.epoch}, f)
print(f"rank {hvd.rank()}: done", flush=True)
