"""The fallback collectives as TensorFlow ops (no gradients), used where the native op library
cannot be built: each hands NumPy views of its inputs to horo's NumPy API inside a blocking
tf.numpy_function and returns tensors. Names are already resolved here."""
import numpy as np
import tensorflow as tf

import horo
from horo import process_sets as _process_sets
from horo.handles import synchronize_all

from horo.tensorflow.tensors import run


def allreduce_group(tensors, names, op, prescale_factor, postscale_factor, process_set):
    """Reduces every tensor; all are enqueued before any is awaited, so they fuse."""
    tensors = list(tensors)

    def body(*arrays):
        handles = [
            horo.allreduce_async(a, name=n, op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                                 process_set=process_set)
            for a, n in zip(arrays, names)
        ]
        return synchronize_all(handles)

    return run(body, tensors, [t.dtype for t in tensors], [t.shape for t in tensors], "HoroAllreduce")


def allgather_group(tensors, names, process_set):
    """Concatenates every rank's tensors along dim 0 (which may differ per rank)."""
    tensors = list(tensors)

    def body(*arrays):
        handles = [horo.allgather_async(a, name=n, process_set=process_set) for a, n in zip(arrays, names)]
        return synchronize_all(handles)

    shapes = [tf.TensorShape([None]).concatenate(t.shape[1:]) if t.shape.rank else tf.TensorShape([None])
              for t in tensors]
    return run(body, tensors, [t.dtype for t in tensors], shapes, "HoroAllgather")


def broadcast_group(tensors, names, root_rank, process_set):
    tensors = list(tensors)

    def body(*arrays):
        handles = [horo.broadcast_async(a, root_rank, name=n, process_set=process_set) for a, n in zip(arrays, names)]
        return synchronize_all(handles)

    return run(body, tensors, [t.dtype for t in tensors], [t.shape for t in tensors], "HoroBroadcast")


def default_splits(rows, count):
    return [rows // count + (1 if r < rows % count else 0) for r in range(count)]


def alltoall(tensor, splits, name, process_set):
    """(received rows, int32 rows received from each rank); `splits` None means even splits."""
    count = _process_sets.set_size(process_set, name)
    inputs = [tensor] if splits is None else [tensor, tf.cast(splits, tf.int32)]

    def body(array, send=None):
        rows = array.shape[0] if array.ndim else 1
        send = default_splits(rows, count) if send is None else [int(s) for s in np.asarray(send).reshape(-1)]
        output, received = horo.alltoall(array, splits=send, name=name, process_set=process_set)
        return [output, np.asarray(received, dtype=np.int32).reshape(count)]

    shape = tf.TensorShape([None]).concatenate(tensor.shape[1:]) if tensor.shape.rank else tf.TensorShape([None])
    return run(body, inputs, [tensor.dtype, tf.int32], [shape, tf.TensorShape([count])], "HoroAlltoall")


def reducescatter_group(tensors, names, op, prescale_factor, postscale_factor, process_set):
    """Reduces, then keeps this rank's share of dim 0 (the first rows % size ranks get one more)."""
    tensors = list(tensors)
    _, me, count = _process_sets.resolve(process_set, names[0] if names else "reducescatter")

    def body(*arrays):
        handles = [
            horo.reducescatter_async(a, op=op, name=n, prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor, process_set=process_set)
            for a, n in zip(arrays, names)
        ]
        return synchronize_all(handles)

    shapes = []
    for t in tensors:
        rows = t.shape[0] if t.shape.rank else 1
        mine = None if rows is None else default_splits(rows, count)[me]
        shapes.append(tf.TensorShape([mine]).concatenate(t.shape[1:]) if t.shape.rank else tf.TensorShape([mine]))
    return run(body, tensors, [t.dtype for t in tensors], shapes, "HoroReducescatter")


def join():
    return run(lambda: [np.int32(horo.join())], [], [tf.int32], [tf.TensorShape([])], "HoroJoin")[0]


def barrier(name, process_set):
    def body():
        horo.barrier(name=name, process_set=process_set)
        return [np.int32(0)]

    return run(body, [], [tf.int32], [tf.TensorShape([])], "HoroBarrier")[0]
