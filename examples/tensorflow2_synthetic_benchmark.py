"""Horovod's examples/tensorflow2/tensorflow2_synthetic_benchmark.py, ported to horo: the same
structure (a tf.function step with DistributedGradientTape, variables broadcast after the first
batch, img/sec per iteration), then the same loop in one process without communication (rank 0
alone while the others wait), so the scaling efficiency is visible.

    mpirun -np 2 python examples/tensorflow2_synthetic_benchmark.py
    mpirun -np 2 python examples/tensorflow2_synthetic_benchmark.py --model ResNet50 --image-size 224

The default model is a small MLP on 32x32x3 images (CPU-friendly); --model takes any
keras.applications name, as Horovod's example does (ResNet50 there).
"""
import argparse
import timeit

import numpy as np
import tensorflow as tf
from tensorflow.keras import applications

import horo.tensorflow as hvd  # was: import horovod.tensorflow as hvd

parser = argparse.ArgumentParser(description="TensorFlow Synthetic Benchmark (horo)",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument("--fp16-allreduce", action="store_true", default=False, help="use fp16 compression during allreduce")
parser.add_argument("--model", type=str, default="mlp", help="mlp, or a keras.applications model name")
parser.add_argument("--image-size", type=int, default=32, help="input images are image-size^2 x 3")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size")
parser.add_argument("--num-warmup-batches", type=int, default=10, help="number of warm-up batches that don't count towards benchmark")
parser.add_argument("--num-batches-per-iter", type=int, default=10, help="number of batches per benchmark iteration")
parser.add_argument("--num-iters", type=int, default=10, help="number of benchmark iterations")
parser.add_argument("--no-single", action="store_true", help="skip the one-process comparison")
args = parser.parse_args()

# Horovod: initialize Horovod.
hvd.init()
device = "CPU"


def build_model():
    if args.model == "mlp":
        return tf.keras.Sequential([
            tf.keras.Input((args.image_size, args.image_size, 3)),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(1024, activation="relu"),
            tf.keras.layers.Dense(1024, activation="relu"),
            tf.keras.layers.Dense(1000, activation="softmax"),
        ])
    return getattr(applications, args.model)(weights=None, input_shape=(args.image_size, args.image_size, 3))


tf.random.set_seed(42)
model = build_model()
opt = tf.optimizers.SGD(0.01)
data = tf.random.uniform([args.batch_size, args.image_size, args.image_size, 3])
target = tf.random.uniform([args.batch_size, 1], minval=0, maxval=999, dtype=tf.int64)


def make_step(model, opt, distributed):
    @tf.function
    def benchmark_step(first_batch):
        # Horovod: (optional) compression algorithm.
        compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

        # Horovod: use DistributedGradientTape
        with tf.GradientTape() as tape:
            probs = model(data, training=True)
            loss = tf.losses.sparse_categorical_crossentropy(target, probs)

        # Horovod: add Horovod Distributed GradientTape.
        if distributed:
            tape = hvd.DistributedGradientTape(tape, compression=compression)

        gradients = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(gradients, model.trainable_variables))

        # Horovod: broadcast initial variable states from rank 0 to all other processes.
        # This is necessary to ensure consistent initialization of all workers when
        # training is started with random weights or restored from a checkpoint.
        #
        # Note: broadcast should be done after the first gradient step to ensure optimizer
        # initialization.
        if distributed and first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)

    return benchmark_step


def log(s, nl=True):
    if hvd.rank() != 0:
        return
    print(s, end="\n" if nl else "", flush=True)


def run(benchmark_step, report):
    """Warm-up, then --num-iters timed iterations; img/sec of each."""
    benchmark_step(first_batch=True)
    timeit.timeit(lambda: benchmark_step(first_batch=False), number=args.num_warmup_batches)
    img_secs = []
    for x in range(args.num_iters):
        time = timeit.timeit(lambda: benchmark_step(first_batch=False), number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / time
        if report:
            log("Iter #%d: %.1f img/sec per %s" % (x, img_sec, device))
        img_secs.append(img_sec)
    return img_secs


log("Model: %s" % args.model)
log("Batch size: %d" % args.batch_size)
log("Number of %ss: %d" % (device, hvd.size()))

with tf.device(device):
    log("Running warmup...")
    img_secs = run(make_step(model, opt, distributed=True), report=True)
    # Results
    img_sec_mean = np.mean(img_secs)
    img_sec_conf = 1.96 * np.std(img_secs)
    log("Img/sec per %s: %.1f +-%.1f" % (device, img_sec_mean, img_sec_conf))
    log("Total img/sec on %d %s(s): %.1f +-%.1f" % (hvd.size(), device, hvd.size() * img_sec_mean,
                                                    hvd.size() * img_sec_conf))

    if not args.no_single:
        # The same loop in one process, without communication: rank 0 alone, the others wait.
        if hvd.rank() == 0:
            single = float(np.median(run(make_step(build_model(), tf.optimizers.SGD(0.01), distributed=False),
                                         report=False)))
            total = hvd.size() * img_sec_mean
            log("Img/sec with 1 process (same loop, no communication): %.1f" % single)
            log("Scaling efficiency on %d %s(s): %.0f%% (%.1f / (%d x %.1f))"
                % (hvd.size(), device, 100.0 * total / (hvd.size() * single), total, hvd.size(), single))
        hvd.barrier()
