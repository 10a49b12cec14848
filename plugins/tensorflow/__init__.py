"""horo for TensorFlow 2: Horovod's `horovod.tensorflow` API over horo's core.

    import horo.tensorflow as hvd
    hvd.init()
    with tf.GradientTape() as tape:
        loss = ...
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)

The collectives are native asynchronous TensorFlow ops (AsyncOpKernels, built against
the installed TensorFlow at first import and cached; see native.py), so they work
eagerly, in tf.function, in Keras model.fit and in SavedModels, with gradients
registered. Where the op library cannot be built they fall back to tf.numpy_function.
"""
from horo.errors import HoroError, HorovodInternalError, HoroValueError, HostsUpdatedInterrupt
from horo.timeline import start_timeline, stop_timeline
from horo.ops import Adasum, Average, Max, Min, Product, Sum
from horo.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set

from horo.build_info import (
    ccl_built,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    mpi_built,
    mpi_enabled,
    nccl_built,
    rocm_built,
)
from horo.tensorflow.basics import (
    cross_rank,
    cross_size,
    init,
    is_homogeneous,
    is_initialized,
    local_rank,
    local_rank_op,
    local_size,
    local_size_op,
    mpi_threads_supported,
    rank,
    rank_op,
    shutdown,
    size,
    size_op,
)
from horo.tensorflow.collectives import (
    allgather,
    allreduce,
    alltoall,
    barrier,
    broadcast,
    grouped_allgather,
    grouped_allreduce,
    join,
    reducescatter,
)
from horo.tensorflow.compression import Compression
from horo.tensorflow.functions import allgather_object, broadcast_object, broadcast_variables
from horo.tensorflow.gradient_tape import DistributedGradientTape, PartialDistributedGradientTape
from horo.tensorflow.gradient_aggregation import LocalGradientAggregationHelper
from horo.tensorflow.sync_batch_norm import SyncBatchNormalization
from horo.tensorflow import util
from horo.tensorflow.util import _executing_eagerly
from horo.tensorflow.horovod_names import (
    BroadcastGlobalVariablesHook,
    DistributedOptimizer,
    broadcast_,
    broadcast_global_variables,
    broadcast_object_fn,
    gpu_available,
    grouped_reducescatter,
    process_set_included_op,
)
from horo.tensorflow import elastic  # noqa: E402  (after the names it builds on)

__all__ = [
    "HoroError", "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "ProcessSet", "add_process_set", "remove_process_set", "global_process_set",
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size", "cross_rank",
    "mpi_threads_supported", "size_op", "rank_op", "local_size_op", "local_rank_op", "is_homogeneous",
    "mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "nccl_built", "ddl_built", "ccl_built",
    "cuda_built", "rocm_built",
    "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast", "alltoall",
    "reducescatter", "grouped_reducescatter", "join", "barrier",
    "broadcast_variables", "broadcast_object", "allgather_object",
    "Compression", "DistributedGradientTape",
    "HoroValueError", "HorovodInternalError", "HostsUpdatedInterrupt", "start_timeline", "stop_timeline",
    "BroadcastGlobalVariablesHook", "DistributedOptimizer", "LocalGradientAggregationHelper",
    "PartialDistributedGradientTape", "SyncBatchNormalization", "broadcast_", "broadcast_global_variables",
    "broadcast_object_fn", "elastic", "gpu_available", "process_set_included_op",
]
