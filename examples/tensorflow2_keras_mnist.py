"""Horovod's examples/tensorflow2/tensorflow2_keras_mnist.py, ported to horo and Keras 3: the same
structure, model and callbacks, with the import line changed and MNIST replaced by data that needs
no download (scikit-learn's bundled 8x8 digits, upsampled to MNIST's 28x28).

    mpirun -np 2 python examples/tensorflow2_keras_mnist.py --epochs 4
"""
import argparse
import os
import tempfile

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

import horo.tensorflow.keras as hvd  # was: import horovod.tensorflow.keras as hvd

parser = argparse.ArgumentParser(description="TensorFlow 2 Keras MNIST Example (horo)")
parser.add_argument("--epochs", type=int, default=24, help="epochs (Horovod's example: 24)")
parser.add_argument("--steps-per-epoch", type=int, default=500, help="steps per epoch over all ranks")
parser.add_argument("--checkpoint-dir", default=os.path.join(tempfile.gettempdir(), "horo-examples"),
                    help="rank 0 writes checkpoint-{epoch}.keras here")
args = parser.parse_args()

# Horovod: initialize Horovod.
hvd.init()

# The digits as 28x28 MNIST-like images in [0, 1]; each rank shuffles with its own seed, as
# Horovod's example lets each rank load (and shuffle) its own copy of MNIST.
digits = load_digits()
images = tf.image.resize(digits.images[..., np.newaxis] / 16.0, (28, 28)).numpy().astype(np.float32)
dataset = tf.data.Dataset.from_tensor_slices((images, digits.target.astype(np.int64)))
dataset = dataset.repeat().shuffle(10000, seed=hvd.rank()).batch(128)

mnist_model = tf.keras.Sequential([
    tf.keras.Input((28, 28, 1)),
    tf.keras.layers.Conv2D(32, [3, 3], activation="relu"),
    tf.keras.layers.Conv2D(64, [3, 3], activation="relu"),
    tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
    tf.keras.layers.Dropout(0.25),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(128, activation="relu"),
    tf.keras.layers.Dropout(0.5),
    tf.keras.layers.Dense(10, activation="softmax"),
])

# Horovod: adjust learning rate based on number of GPUs.
scaled_lr = 0.001 * hvd.size()
opt = tf.optimizers.Adam(scaled_lr)

# Horovod: add Horovod DistributedOptimizer.
opt = hvd.DistributedOptimizer(opt, backward_passes_per_step=1, average_aggregated_gradients=True)

# Horovod's example also passes experimental_run_tf_function=False, which Keras 3 no longer has
# (nor needs: horo's optimizer works inside Keras's compiled train step).
mnist_model.compile(loss=tf.losses.SparseCategoricalCrossentropy(), optimizer=opt, metrics=["accuracy"])

callbacks = [
    # Horovod: broadcast initial variable states from rank 0 to all other processes.
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    # Horovod: average metrics among workers at the end of every epoch.
    hvd.callbacks.MetricAverageCallback(),
    # Horovod: using `lr = 1.0 * hvd.size()` from the very beginning leads to worse final accuracy.
    # Scale the learning rate `lr = 1.0` ---> `lr = 1.0 * hvd.size()` during the first three epochs.
    hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=3, verbose=1),
]

# Horovod: save checkpoints only on worker 0 to prevent other workers from corrupting them.
if hvd.rank() == 0:
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    callbacks.append(tf.keras.callbacks.ModelCheckpoint(os.path.join(args.checkpoint_dir, "checkpoint-{epoch}.keras")))

# Horovod: write logs on worker 0.
verbose = 2 if hvd.rank() == 0 else 0

# Train the model.
# Horovod: adjust number of steps based on number of GPUs.
history = mnist_model.fit(dataset, steps_per_epoch=args.steps_per_epoch // hvd.size(), callbacks=callbacks,
                          epochs=args.epochs, verbose=verbose)
if hvd.rank() == 0:
    print(f"final training accuracy (averaged over ranks): {100.0 * history.history['accuracy'][-1]:.2f}%", flush=True)
