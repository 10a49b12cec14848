"""horo: collective communication for data-parallel training.

    import horo
    horo.init()
    grad = horo.allreduce(grad, name="grad")   # Average across ranks

Launch with `mpirun -np N python train.py`; without mpirun it is a world of one.
"""
import logging

from horo.errors import HoroError, HorovodInternalError, HoroValueError
from horo.allgather import allgather, allgather_async, grouped_allgather, grouped_allgather_async
from horo.alltoall import alltoall, alltoall_async
from horo.barrier import barrier
from horo.broadcast import broadcast, broadcast_, broadcast_async, broadcast_async_
from horo.join import join
from horo.objects import allgather_object, broadcast_object
from horo.point_to_point import P2POp, batch_isend_irecv, irecv, isend, recv, send
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
    is_homogeneous,
    is_initialized,
    local_rank,
    local_size,
    mpi_threads_supported,
    rank,
    shutdown,
    size,
    tunables,
)
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
from horo.gpu import gpu_available, gpu_info, nccl_version
from horo.handles import poll, synchronize
from horo.timeline import start_timeline, stop_timeline
from horo.ops import Adasum, Average, Max, Min, Product, Sum

__version__ = "0.1.0"

__all__ = [
    "HoroError", "HoroValueError", "HorovodInternalError", "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank", "is_homogeneous", "mpi_threads_supported", "tunables",
    "mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "nccl_built", "ddl_built", "ccl_built", "cuda_built",
    "rocm_built",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "grouped_reducescatter", "grouped_reducescatter_async", "barrier",
    "broadcast_object", "allgather_object",
    "send", "recv", "isend", "irecv", "batch_isend_irecv", "P2POp",
    "gather", "gather_async", "scatter", "scatter_async", "reduce", "reduce_async",
    "ProcessSet", "add_process_set", "remove_process_set", "global_process_set",
    "join", "poll", "synchronize", "gpu_available", "gpu_info", "nccl_version", "start_timeline", "stop_timeline",
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
]

# The core's log lines (stall warnings above all) go to logger "horo" as well as to
# stderr: applications route them with a handler; by default Python adds no second copy.
logging.getLogger("horo").addHandler(logging.NullHandler())
