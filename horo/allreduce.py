"""allreduce and its in-place, async and grouped variants on NumPy arrays
(anything with the buffer protocol or DLPack), with Horovod's signatures."""
import itertools

import numpy as np

from horo import dtypes, ops
from horo._native import _core
from horo.handles import synchronize, track
from horo.tensors import address, as_array

_unnamed = itertools.count()


def _name(name, prefix="allreduce"):
    # Unnamed tensors are numbered in call order, which every rank shares.
    return name if name is not None else f"{prefix}.noname.{next(_unnamed)}"


def _enqueue(tensor, output, name, op, prescale_factor, postscale_factor, keepalive):
    return track(
        _core.enqueue_allreduce(
            name,
            address(tensor),
            address(output),
            dtypes.code_of(tensor.dtype, name),
            tensor.shape,
            op,
            float(prescale_factor),
            float(postscale_factor),
        ),
        name,
        output,
        keepalive,
    )


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    """Starts an out-of-place allreduce; returns a handle for synchronize()."""
    name = _name(name)
    op = ops.resolve(op, average, name)
    array = as_array(tensor, name)
    output = np.empty_like(array)
    return _enqueue(array, output, name, op, prescale_factor, postscale_factor, (array, output))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    """Starts an in-place allreduce of `tensor`; returns a handle for synchronize()."""
    name = _name(name)
    op = ops.resolve(op, average, name)
    array = as_array(tensor, name, in_place=True)
    handle = _enqueue(array, array, name, op, prescale_factor, postscale_factor, (array,))
    if array is not tensor:  # a DLPack/buffer view: hand the caller's object back
        track(handle, name, tensor, (array, tensor))
    return handle


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` across every rank (Average by default) into a new array."""
    return synchronize(allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor))


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` across every rank in place and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor))


def _group_names(name, count):
    base = name if name is not None else f"grouped_allreduce.noname.{next(_unnamed)}"
    return [f"{base}.{i}" for i in range(count)]


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    """Starts one allreduce per tensor (enqueued together, so they fuse); returns their handles."""
    return [
        allreduce_async(t, average, n, op, prescale_factor, postscale_factor)
        for t, n in zip(tensors, _group_names(name, len(tensors)))
    ]


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    return [
        allreduce_async_(t, average, n, op, prescale_factor, postscale_factor)
        for t, n in zip(tensors, _group_names(name, len(tensors)))
    ]


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    handles = grouped_allreduce_async(tensors, average, name, op, prescale_factor, postscale_factor)
    return _synchronize_all(handles)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    handles = grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor)
    return _synchronize_all(handles)


def _synchronize_all(handles):
    # Wait for every member even if one fails, so none is left in flight.
    results, error = [], None
    for handle in handles:
        try:
            results.append(synchronize(handle))
        except Exception as e:  # noqa: BLE001 - re-raised below
            error = error or e
    if error is not None:
        raise error
    return results
