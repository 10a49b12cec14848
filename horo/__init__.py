"""horo: collective communication for data-parallel training.

    import horo
    horo.init()
    grad = horo.allreduce(grad, name="grad")   # Average across ranks

Launch with `mpirun -np N python train.py`; without mpirun it is a world of one.
"""
import importlib as _importlib
from importlib import util as _importlib_util
import logging
import sys as _sys
import types as _types
from typing import TYPE_CHECKING

# Where each public name lives. `import horo` loads none of them (the launcher, horo-run, is
# inside this package and must start without NumPy and the compiled core); the first use of any
# one of them imports them all, in this order.
_API = (
    ("horo.errors", ("HoroError", "HorovodInternalError", "HoroValueError")),
    ("horo.allgather", ("allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async")),
    ("horo.alltoall", ("alltoall", "alltoall_async")),
    ("horo.barrier", ("barrier",)),
    ("horo.broadcast", ("broadcast", "broadcast_", "broadcast_async", "broadcast_async_")),
    ("horo.join", ("join",)),
    ("horo.objects", ("allgather_object", "broadcast_object")),
    ("horo.point_to_point", ("P2POp", "batch_isend_irecv", "irecv", "isend", "recv", "send")),
    ("horo.process_sets", ("ProcessSet", "add_process_set", "global_process_set", "remove_process_set")),
    ("horo.rooted", ("gather", "gather_async", "reduce", "reduce_async", "scatter", "scatter_async")),
    ("horo.reducescatter", ("grouped_reducescatter", "grouped_reducescatter_async", "reducescatter",
                            "reducescatter_async")),
    ("horo.allreduce", ("allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce",
                        "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_")),
    ("horo.basics", ("cross_rank", "cross_size", "init", "is_homogeneous", "is_initialized", "local_rank",
                     "local_size", "mpi_threads_supported", "rank", "shutdown", "size", "tunables")),
    ("horo.build_info", ("ccl_built", "cuda_built", "ddl_built", "gloo_built", "gloo_enabled", "mpi_built",
                         "mpi_enabled", "nccl_built", "rocm_built", "sycl_built")),
    ("horo.gpu", ("gpu_available", "gpu_info", "nccl_version")),
    ("horo.handles", ("poll", "synchronize")),
    ("horo.timeline", ("start_timeline", "stop_timeline")),
    ("horo.ops", ("Adasum", "Average", "Max", "Min", "Product", "Sum")),
)
if TYPE_CHECKING:  # the same names, for type checkers and the API reference (griffe reads the code)
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
        sycl_built,
    )
    from horo.gpu import gpu_available, gpu_info, nccl_version
    from horo.handles import poll, synchronize
    from horo.timeline import start_timeline, stop_timeline
    from horo.ops import Adasum, Average, Max, Min, Product, Sum

_HOME = {name: module for module, names in _API for name in names}
_loading = False


def _load_api():
    global _loading
    _loading = True
    try:
        for module, names in _API:
            loaded = _importlib.import_module(module)
            for name in names:
                globals()[name] = getattr(loaded, name)
    finally:
        _loading = False


def __getattr__(name):
    module = _HOME.get(name)
    if module is None:
        # A submodule (horo._native, horo.enqueue, ...) was an attribute once `import horo` had
        # loaded the API; it is one on first use now, as the import system's own `from horo import x`.
        if not name.startswith("__") and _importlib_util.find_spec(f"horo.{name}") is not None:
            return _importlib.import_module(f"horo.{name}")
        raise AttributeError(f"module 'horo' has no attribute {name!r}")
    if _loading:  # asked for by a module the full load is importing: that name's module alone
        return getattr(_importlib.import_module(module), name)
    _load_api()
    return globals()[name]


def __dir__():
    return sorted(set(globals()) | set(_HOME))


class _Package(_types.ModuleType):
    def __setattr__(self, name, value):
        # The import system sets horo.allreduce (and the like) to the submodule when it first loads it,
        # which would hide the function of that name; the function is what `horo.allreduce` means.
        if name in _HOME and isinstance(value, _types.ModuleType) and value.__name__ == f"horo.{name}":
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package

__version__ = "0.1.0"

__all__ = [
    "HoroError", "HoroValueError", "HorovodInternalError", "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank", "is_homogeneous", "mpi_threads_supported", "tunables",
    "mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "nccl_built", "ddl_built", "ccl_built", "cuda_built",
    "rocm_built", "sycl_built",
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
