"""allreduce and its in-place, async and grouped variants on NumPy arrays
(anything with the buffer protocol or DLPack), with Horovod's signatures."""

import numpy as np

from horo import ops
from horo.enqueue import checked_array, enqueue, enqueue_group, plain_call, refusing, returning, tensor_name
from horo.handles import blocking, synchronize_all
from horo.tensors import as_array, empty_like


def _start(tensor, average, name, op, prescale_factor, postscale_factor, process_set, in_place, waits):
    """Checks and enqueues one allreduce; returns its handle, or with `waits` its result: the core
    runs it on this thread in one call (enqueue's `waits`; allreduce() says so by argument, since
    @blocking's wrapper and thread-local cost 0.4-0.7 us, a tenth of a small allreduce)."""
    name = tensor_name(name, "allreduce", process_set, waits)
    op = ops.resolve(op, average, name, adasum=True)
    array = checked_array(tensor, "allreduce", name, process_set, in_place)
    # In place, a DLPack/buffer view reduces in the caller's memory: the caller's object goes back.
    output = array if in_place else empty_like(array)
    return enqueue("allreduce", name, array, output, returning(tensor if in_place else output), op, prescale_factor,
                   postscale_factor, process_set=process_set, waits=waits)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Starts an out-of-place allreduce; returns a handle for synchronize()."""
    return _start(tensor, average, name, op, prescale_factor, postscale_factor, process_set, False, False)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Starts an in-place allreduce of `tensor`; returns a handle for synchronize()."""
    return _start(tensor, average, name, op, prescale_factor, postscale_factor, process_set, True, False)


_plain = plain_call("allreduce", default_op=ops.Average)
_plain_in_place = plain_call("allreduce", in_place=True, default_op=ops.Average)


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Reduces `tensor` across every rank (Average by default) into a new array."""
    if average is None and type(tensor) is np.ndarray:  # the deprecated average= is the full path's to resolve
        result = _plain(tensor, name, process_set, 0, op, prescale_factor, postscale_factor, empty_like(tensor))
        if result is not NotImplemented:
            return result
    return _start(tensor, average, name, op, prescale_factor, postscale_factor, process_set, False, True)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Reduces `tensor` across every rank in place and returns it."""
    if average is None:
        result = _plain_in_place(tensor, name, process_set, 0, op, prescale_factor, postscale_factor)
        if result is not NotImplemented:
            return result
    return _start(tensor, average, name, op, prescale_factor, postscale_factor, process_set, True, True)


def tensor_list(tensors, collective):
    if not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{collective}: tensors must be a list or tuple of tensors, got {type(tensors).__name__}")
    return tensors


def group_names(tensors, name, collective, process_set):
    """One name per tensor of a grouped call, `<base>.<i>`; `tensors` must be a list or tuple."""
    tensor_list(tensors, collective)
    base = tensor_name(name, collective, process_set)
    return [f"{base}.{i}" for i in range(len(tensors))]


def _grouped_async(tensors, average, name, op, prescale_factor, postscale_factor, process_set, in_place):
    # Every tensor is checked before any is enqueued: a bad one must not leave the
    # others in flight (collectives the other ranks never hear of, their names taken meanwhile).
    names = group_names(tensors, name, "grouped_allreduce", process_set)
    op = ops.resolve(op, average, names[0] if names else "grouped_allreduce", adasum=True)
    with refusing("allreduce", names, process_set):
        arrays = [as_array(t, n, in_place=in_place) for t, n in zip(tensors, names)]

    def enqueue_one(array, name, tensor):
        output = array if in_place else empty_like(array)
        return enqueue("allreduce", name, array, output, returning(tensor if in_place else output), op,
                       prescale_factor, postscale_factor, process_set=process_set)

    return enqueue_group(lambda a=a, n=n, t=t: enqueue_one(a, n, t) for a, n, t in zip(arrays, names, tensors))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Starts one allreduce per tensor (enqueued together, so they fuse); returns their handles."""
    return _grouped_async(tensors, average, name, op, prescale_factor, postscale_factor, process_set, False)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return _grouped_async(tensors, average, name, op, prescale_factor, postscale_factor, process_set, True)


@blocking
def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    handles = grouped_allreduce_async(tensors, average, name, op, prescale_factor, postscale_factor, process_set)
    return synchronize_all(handles)


@blocking
def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    handles = grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor, process_set)
    return synchronize_all(handles)
