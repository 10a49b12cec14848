"""Turning what callers pass into a buffer the core can use, or saying why not."""
import math

import numpy as np

from horo.errors import HoroValueError
from horo import cuda_arrays
from horo._native import _core


def as_array(tensor, name, in_place=False):
    """A C-contiguous ndarray viewing `tensor`'s memory (never a copy); for CUDA
    arrays (CuPy, `__cuda_array_interface__`) a horo.cuda_arrays.CudaBuffer."""
    if isinstance(tensor, np.ndarray):
        array = tensor
    elif cuda_arrays.is_cuda_array(tensor):
        return cuda_arrays.as_cuda_buffer(tensor, name, in_place)
    elif hasattr(tensor, "__dlpack__"):
        array = np.from_dlpack(tensor)
    else:
        try:
            array = np.asarray(memoryview(tensor))
        except TypeError:
            raise TypeError(
                f"'{name}': expected a NumPy array or an object with the buffer protocol or __dlpack__, "
                f"got {type(tensor).__name__}"
            ) from None
    if not array.flags.c_contiguous:
        raise HoroValueError(
            f"'{name}': tensor is not contiguous (shape {array.shape}, strides {array.strides}); "
            "pass np.ascontiguousarray(tensor)"
        )
    if in_place and not array.flags.writeable:
        raise HoroValueError(f"'{name}': an in-place collective needs a writable tensor, this one is read-only")
    return array


def address(array):
    if isinstance(array, cuda_arrays.CudaBuffer):
        return array.address
    return _core.data_address(array)


_CORE_OUTPUTS_FROM = 64 << 10  # host outputs from this size come from the core (see empty)


def _core_output(nbytes, dtype, shape):
    return _core.empty(nbytes).view(dtype).reshape(shape)


def empty(shape, dtype, like):
    """An uninitialised output of `shape` and `dtype` in the same memory as `like` (host or GPU).
    On the host, from 64 KiB up it comes from the core: its shared-memory heap, where the
    host's peers write their results straight into it (MEASUREMENTS.md, "The heaps: writing into
    the peers' outputs"), else its buffer pool, whose recycled buffers are
    already mapped where a fresh one takes a page fault per 4 KiB on first touch."""
    if isinstance(like, cuda_arrays.CudaBuffer):
        return cuda_arrays.empty(shape, dtype, like)
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    return np.empty(shape, dtype=dtype) if nbytes < _CORE_OUTPUTS_FROM else _core_output(nbytes, dtype, shape)


def empty_like(array):
    """An uninitialised output like `array` (see empty; every call's path: no more than it needs)."""
    if isinstance(array, cuda_arrays.CudaBuffer):
        return cuda_arrays.empty(array.shape, array.dtype, array)
    if array.nbytes < _CORE_OUTPUTS_FROM:
        return np.empty_like(array)
    return _core_output(array.nbytes, array.dtype, array.shape)
