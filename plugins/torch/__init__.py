"""horo for PyTorch: `import horo.torch as hvd` in place of `import horovod.torch as hvd`.

    import horo.torch as hvd
    hvd.init()
    model = ...
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size()),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()   # gradients are allreduced as autograd produces them
        opt.step()

Pure Python over horo's core (no torch headers compiled): CPU tensors of dtype
uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64 (bool: not reduced).
"""
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
)
from horo.errors import HoroError, HorovodInternalError, HoroValueError, HostsUpdatedInterrupt
from horo.timeline import start_timeline, stop_timeline
from horo.barrier import barrier as _barrier
from horo.join import join as _join
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
    sycl_built,
)
from horo.torch.collectives import (
    allgather,
    allgather_async,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    alltoall_async,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    grouped_allgather,
    grouped_allgather_async,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    grouped_reducescatter,
    grouped_reducescatter_async,
    reducescatter,
    reducescatter_async,
    sparse_allreduce_async,
)
from horo.torch.compression import Compression
from horo.torch.functions import allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters
from horo.torch.handles import poll, synchronize
from horo.torch.optimizer import DistributedOptimizer
from horo.torch.point_to_point import P2POp, batch_isend_irecv, irecv, isend, recv, send
from horo.torch.sync_batch_norm import SyncBatchNorm


def barrier(process_set=global_process_set):
    """Returns once every rank of `process_set` has called it."""
    _barrier(process_set=process_set)


def join(device=-1):
    """Blocks until every rank has joined (see horo.join); returns the rank that joined last.
    `device` is accepted for Horovod compatibility (CPU only)."""
    return _join()


from horo.torch import elastic  # noqa: E402  (after the names it builds on)

__all__ = [
    "HoroError", "HoroValueError", "HorovodInternalError", "HostsUpdatedInterrupt", "elastic",
    "start_timeline", "stop_timeline", "is_homogeneous", "sparse_allreduce_async", "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size",
    "cross_rank", "mpi_threads_supported", "mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "nccl_built",
    "ddl_built", "ccl_built", "cuda_built", "rocm_built", "sycl_built",
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_", "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "barrier", "join", "poll", "synchronize", "broadcast_object", "allgather_object",
    "broadcast_parameters", "broadcast_optimizer_state", "Compression", "DistributedOptimizer", "SyncBatchNorm",
    "send", "recv", "isend", "irecv", "batch_isend_irecv", "P2POp",
]

import horo.torch.distributed  # noqa: E402,F401 - registers the "horo" torch.distributed backend; needs the names above
