"""reducescatter: reduce across ranks, then rank r keeps its share of the first
dimension (the first rows % size ranks get one row more, as in Horovod)."""

from horo import ops, process_sets
from horo.enqueue import checked_array, enqueue, enqueue_group, plain_call, refusing, returning, tensor_name
from horo.handles import blocking, synchronize_all
from horo.tensors import as_array, empty


def reducescatter_async(tensor, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return _start(tensor, op, name, prescale_factor, postscale_factor, process_set, False)


def _start(tensor, op, name, prescale_factor, postscale_factor, process_set, waits):
    # `waits`: reducescatter() wants the result: returned instead of a handle (see allreduce._start).
    name = tensor_name(name, "reducescatter", process_set, waits)
    op = ops.resolve(op, None, name)
    array = checked_array(tensor, "reducescatter", name, process_set)
    return _enqueue(array, op, name, prescale_factor, postscale_factor, process_set, waits)


def _enqueue(array, op, name, prescale_factor, postscale_factor, process_set, waits=False):
    _, me, n = process_sets.resolve(process_set, name)
    if array.ndim == 0:
        output = empty((0,), array.dtype, like=array)  # never written: the coordinator refuses 0-d on every rank
    else:
        rows = array.shape[0] // n + (1 if me < array.shape[0] % n else 0)
        output = empty((rows, *array.shape[1:]), array.dtype, like=array)
    return enqueue("reducescatter", name, array, output, returning(output), op, prescale_factor, postscale_factor,
                   process_set=process_set, waits=waits)


_plain = plain_call("reducescatter", default_op=ops.Average)


def reducescatter(tensor, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    result = _plain(tensor, name, process_set, 0, op, prescale_factor, postscale_factor)
    if result is not NotImplemented:
        return result
    return _start(tensor, op, name, prescale_factor, postscale_factor, process_set, True)


def grouped_reducescatter_async(tensors, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0,
                                process_set=None):
    from horo.allreduce import group_names

    names = group_names(tensors, name, "grouped_reducescatter", process_set)
    op = ops.resolve(op, None, names[0] if names else "grouped_reducescatter")
    with refusing("reducescatter", names, process_set):  # all checked before any is enqueued
        arrays = [as_array(t, n) for t, n in zip(tensors, names)]
    return enqueue_group(lambda a=a, n=n: _enqueue(a, op, n, prescale_factor, postscale_factor, process_set)
                         for a, n in zip(arrays, names))


@blocking
def grouped_reducescatter(tensors, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Reduce-scatters each tensor; enqueued together, they travel as one fused collective."""
    handles = grouped_reducescatter_async(tensors, op, name, prescale_factor, postscale_factor, process_set)
    return synchronize_all(handles)
