"""The process model as in horovod.tensorflow: horo's init/size/rank..., their
tensor-valued *_op twins, and what this build has (for scripts that ask)."""
import tensorflow as tf

from horo import basics as _basics
from horo.process_sets import global_process_set

init = _basics.init
shutdown = _basics.shutdown
is_initialized = _basics.is_initialized
size = _basics.size
rank = _basics.rank
local_size = _basics.local_size
local_rank = _basics.local_rank
cross_size = _basics.cross_size
cross_rank = _basics.cross_rank
mpi_threads_supported = _basics.mpi_threads_supported


def _process_info_op(native_op, value, name):
    # Native ops read the value when they run (a SavedModel reports the job it runs in);
    # the fallback bakes in this process's value.
    from horo.tensorflow import native

    lib = native.library()
    if lib is not None:
        return getattr(lib, native_op)(name=name)
    return tf.constant(value(), dtype=tf.int32, name=name)


def size_op(process_set_id=0, name=None):
    """The number of ranks (of the process set with this id) as an int32 tensor."""
    if process_set_id != 0:
        from horo import process_sets

        found = process_sets.by_id(process_set_id)
        if found is None:
            raise ValueError(f"size_op: no process set has id {process_set_id}")
        # A set's size is fixed while it exists: read now, where the set is known.
        return tf.constant(found.size(), dtype=tf.int32, name=name)
    return _process_info_op("horo_size", size, name)


def rank_op(name=None):
    return _process_info_op("horo_rank", rank, name)


def local_size_op(name=None):
    return _process_info_op("horo_local_size", local_size, name)


def local_rank_op(name=None):
    return _process_info_op("horo_local_rank", local_rank, name)


def is_homogeneous():
    """True when every node runs the same number of ranks."""
    return size() == local_size() * cross_size()


__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size", "cross_rank",
    "mpi_threads_supported", "size_op", "rank_op", "local_size_op", "local_rank_op", "is_homogeneous",
    "global_process_set",
]
