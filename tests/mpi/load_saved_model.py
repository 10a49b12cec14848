"""Loads the SavedModel that ranks_tensorflow_native.py wrote, in a fresh job that only
imported horo.tensorflow (which registers the ops), and runs it on every rank.

    mpirun -np N python tests/mpi/load_saved_model.py PATH
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import horo.tensorflow as hvd  # noqa: E402

hvd.init()
loaded = tf.saved_model.load(sys.argv[1])
summed, size, rank = loaded(tf.fill([4, 3], float(hvd.rank() + 1)))
expected = np.tile(np.array([1.0, 2.0, 3.0], np.float32) * sum(range(1, hvd.size() + 1)), (4, 1))
np.testing.assert_array_equal(summed.numpy(), expected)
assert (int(size), int(rank)) == (hvd.size(), hvd.rank()), (int(size), int(rank))
print(f"rank {hvd.rank()}: loaded SavedModel ran its allreduce", flush=True)
