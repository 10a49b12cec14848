"""horo for Keras 3 (TensorFlow backend), with Horovod's `horovod.tensorflow.keras` names.

    import keras
    import horo.tensorflow.keras as hvd

    hvd.init()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size())),
                  loss="sparse_categorical_crossentropy")
    model.fit(x_shard, y_shard, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                           hvd.callbacks.MetricAverageCallback()],
              verbose=1 if hvd.rank() == 0 else 0)
    if hvd.rank() == 0:
        model.save("model.keras")            # later: hvd.load_model("model.keras")

The collectives are horo.tensorflow's; this package adds the optimizer wrapper
(optimizer.py), the callbacks (callbacks.py) and load_model (saving.py).
"""
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
from horo.tensorflow import (
    Adasum,
    Average,
    Compression,
    HoroError,
    HorovodInternalError,
    HoroValueError,
    HostsUpdatedInterrupt,
    Max,
    Min,
    Product,
    ProcessSet,
    Sum,
    add_process_set,
    allgather_object,
    alltoall,
    barrier,
    broadcast_object,
    broadcast_variables,
    cross_rank,
    cross_size,
    global_process_set,
    grouped_allgather,
    grouped_allreduce,
    init,
    is_initialized,
    start_timeline,
    stop_timeline,
    join,
    local_rank,
    local_size,
    mpi_threads_supported,
    rank,
    remove_process_set,
    shutdown,
    size,
)
from horo.tensorflow.keras import callbacks
from horo.tensorflow.keras.callbacks import (
    BestModelCheckpoint,
    BroadcastGlobalVariablesCallback,
    LearningRateScheduleCallback,
    LearningRateWarmupCallback,
    MetricAverageCallback,
)
from horo.tensorflow.keras.optimizer import DistributedOptimizer, PartialDistributedOptimizer
from horo.tensorflow.keras.horovod_names import (
    allgather,
    allreduce,
    broadcast,
    broadcast_global_variables,
    reducescatter,
)
from horo.tensorflow.keras.saving import load_model
from horo.tensorflow.sync_batch_norm import SyncBatchNormalization
from horo.tensorflow.keras import elastic  # noqa: E402  (after the names it builds on)

__all__ = [
    "HoroError", "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size",
    "cross_rank", "mpi_threads_supported", "mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "nccl_built",
    "ddl_built", "ccl_built", "cuda_built", "rocm_built", "ProcessSet", "add_process_set", "remove_process_set", "global_process_set",
    "Average", "Sum", "Adasum", "Min", "Max", "Product", "Compression",
    "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast", "alltoall", "reducescatter",
    "join", "barrier", "broadcast_variables", "broadcast_object", "allgather_object",
    "DistributedOptimizer", "load_model", "callbacks",
    "BroadcastGlobalVariablesCallback", "MetricAverageCallback", "LearningRateWarmupCallback",
    "LearningRateScheduleCallback", "HoroValueError", "HorovodInternalError", "HostsUpdatedInterrupt",
    "start_timeline", "stop_timeline", "PartialDistributedOptimizer", "broadcast_global_variables", "elastic",
    "BestModelCheckpoint", "SyncBatchNormalization",
]
