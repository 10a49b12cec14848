"""The collectives as native TensorFlow ops (no gradients): AsyncOpKernels from
ops/horo_ops.cc that submit to horo's core and finish from its completion callback,
so they work eagerly, in tf.function and in SavedModels. Names are already resolved
here and travel as string inputs (a per-call attribute would compile a new eager
kernel for every unnamed call)."""
import tensorflow as tf

from horo import process_sets as _process_sets
from horo.enqueue import checked_root, checked_scale
from horo.errors import HoroValueError


class ProcessSetError(tf.errors.InvalidArgumentError, HoroValueError):
    """A process set this rank cannot use (not a member, not added): TensorFlow's InvalidArgumentError,
    as Horovod's op raises it, and still horo's HoroValueError (a ValueError)."""

    def __init__(self, message):
        tf.errors.InvalidArgumentError.__init__(self, None, None, message)


def _resolve(process_set, name):
    try:
        resolved = _process_sets.resolve(process_set, name)
    except HoroValueError as e:
        raise ProcessSetError(str(e)) from None
    if resolved[0] != 0 and _process_sets.by_id(resolved[0]) is not process_set:
        # An id set by hand on a set that was never added: the core would refuse it mid-collective.
        raise ProcessSetError(f"'{name}': {process_set!r} is not a process set added with add_process_set")
    return resolved


def _set_id(process_set, name):
    return _resolve(process_set, name)[0]


def _at_least_1d(tensor):
    # As horo's NumPy API: a scalar travels as one row.
    return tf.reshape(tensor, [1]) if tensor.shape.rank == 0 else tensor


class NativeOps:
    def __init__(self, lib):
        self.lib = lib

    def allreduce_group(self, tensors, names, op, prescale_factor, postscale_factor, process_set):
        """All submitted by one kernel before any completes, so the core can fuse them."""
        tensors = list(tensors)
        set_id = _set_id(process_set, names[0] if names else "allreduce")
        args = dict(reduce_op=int(op), prescale_factor=checked_scale(prescale_factor, "prescale_factor", names[0]),
                    postscale_factor=checked_scale(postscale_factor, "postscale_factor", names[0]),
                    process_set_id=set_id)
        if len(tensors) == 1:
            return [self.lib.horo_allreduce(tensors[0], names[0], **args)]
        return list(self.lib.horo_grouped_allreduce(tensors, list(names), **args))

    def allgather_group(self, tensors, names, process_set):
        set_id = _set_id(process_set, names[0] if names else "allgather")
        return [self.lib.horo_allgather(_at_least_1d(t), n, process_set_id=set_id) for t, n in zip(tensors, names)]

    def broadcast_group(self, tensors, names, root_rank, process_set):
        tensors = list(tensors)
        set_id = _set_id(process_set, names[0] if names else "broadcast")
        root_rank = checked_root(root_rank, names[0] if names else "broadcast")
        return list(self.lib.horo_broadcast(tensors, list(names), root_rank=root_rank, process_set_id=set_id))

    def alltoall(self, tensor, splits, name, process_set):
        """(received rows, int32 rows received from each rank); `splits` None means even splits."""
        set_id, _, count = _resolve(process_set, name)
        tensor = _at_least_1d(tensor)
        if splits is None:
            rows = tf.shape(tensor, out_type=tf.int32)[0]
            splits = rows // count + tf.cast(tf.range(count) < rows % count, tf.int32)
        output, received = self.lib.horo_alltoall(tensor, tf.cast(splits, tf.int32), name, process_set_id=set_id)
        return output, received

    def reducescatter_group(self, tensors, names, op, prescale_factor, postscale_factor, process_set):
        set_id, me, count = _resolve(process_set, names[0] if names else "reducescatter")
        tensors = [_at_least_1d(t) for t in tensors]
        return list(self.lib.horo_reducescatter(tensors, list(names), reduce_op=int(op),
                                                prescale_factor=checked_scale(prescale_factor, "prescale_factor",
                                                                              names[0]),
                                                postscale_factor=checked_scale(postscale_factor, "postscale_factor",
                                                                               names[0]), set_rank=me,
                                                set_size=count, process_set_id=set_id))

    def join(self):
        return self.lib.horo_join()

    def barrier(self, name, process_set):
        return self.lib.horo_barrier(name, process_set_id=_set_id(process_set, name))
