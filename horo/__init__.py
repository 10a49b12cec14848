"""horo: collective communication for data-parallel training.

    import horo
    horo.init()
    grad = horo.allreduce(grad, name="grad")   # Average across ranks

Launch with `mpirun -np N python train.py`; without mpirun it is a world of one.
"""
from horo._native import HoroError
from horo.allgather import allgather, allgather_async, grouped_allgather, grouped_allgather_async
from horo.alltoall import alltoall, alltoall_async
from horo.barrier import barrier
from horo.broadcast import broadcast, broadcast_, broadcast_async, broadcast_async_
from horo.join import join
from horo.objects import allgather_object, broadcast_object
from horo.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from horo.rooted import gather, gather_async, reduce, reduce_async, scatter, scatter_async
from horo.reducescatter import (
    grouped_reducescatter,
    grouped_reducescatter_async,
    reducescatter,
    reducescatter_async,
)
from horo.allreduce import (
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
)
from horo.basics import (
    cross_rank,
    cross_size,
    init,
    is_initialized,
    local_rank,
    local_size,
    mpi_threads_supported,
    rank,
    shutdown,
    size,
    tunables,
)
from horo.gpu import gpu_available, gpu_info, nccl_version
from horo.handles import poll, synchronize
from horo.timeline import start_timeline, stop_timeline
from horo.ops import Adasum, Average, Max, Min, Product, Sum

__version__ = "0.1.0"

__all__ = [
    "HoroError", "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank", "mpi_threads_supported", "tunables",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "grouped_reducescatter", "grouped_reducescatter_async", "barrier",
    "broadcast_object", "allgather_object",
    "gather", "gather_async", "scatter", "scatter_async", "reduce", "reduce_async",
    "ProcessSet", "add_process_set", "remove_process_set", "global_process_set",
    "join", "poll", "synchronize", "gpu_available", "gpu_info", "nccl_version", "start_timeline", "stop_timeline",
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
]
