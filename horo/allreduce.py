"""allreduce and its in-place, async and grouped variants on NumPy arrays
(anything with the buffer protocol or DLPack), with Horovod's signatures."""

from horo import ops
from horo.enqueue import enqueue, refusing, returning, tensor_name
from horo.handles import synchronize, synchronize_all
from horo.tensors import as_array, empty_like


def _enqueue(array, output, name, op, prescale_factor, postscale_factor, process_set, result=None):
    finish = returning(output if result is None else result)
    return enqueue("allreduce", name, array, output, finish, op, prescale_factor, postscale_factor,
                   process_set=process_set)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Starts an out-of-place allreduce; returns a handle for synchronize()."""
    name = tensor_name(name, "allreduce", process_set)
    op = ops.resolve(op, average, name)
    with refusing("allreduce", name, process_set):
        array = as_array(tensor, name)
    return _enqueue(array, empty_like(array), name, op, prescale_factor, postscale_factor, process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Starts an in-place allreduce of `tensor`; returns a handle for synchronize()."""
    name = tensor_name(name, "allreduce", process_set)
    op = ops.resolve(op, average, name)
    with refusing("allreduce", name, process_set):
        array = as_array(tensor, name, in_place=True)
    # A DLPack/buffer view reduces in place in the caller's memory: hand the caller's object back.
    return _enqueue(array, array, name, op, prescale_factor, postscale_factor, process_set, result=tensor)


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Reduces `tensor` across every rank (Average by default) into a new array."""
    return synchronize(allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Reduces `tensor` across every rank in place and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def _group_names(name, count, process_set):
    base = tensor_name(name, "grouped_allreduce", process_set)
    return [f"{base}.{i}" for i in range(count)]


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Starts one allreduce per tensor (enqueued together, so they fuse); returns their handles."""
    return [
        allreduce_async(t, average, n, op, prescale_factor, postscale_factor, process_set)
        for t, n in zip(tensors, _group_names(name, len(tensors), process_set))
    ]


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return [
        allreduce_async_(t, average, n, op, prescale_factor, postscale_factor, process_set)
        for t, n in zip(tensors, _group_names(name, len(tensors), process_set))
    ]


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    handles = grouped_allreduce_async(tensors, average, name, op, prescale_factor, postscale_factor, process_set)
    return synchronize_all(handles)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    handles = grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor, process_set)
    return synchronize_all(handles)
