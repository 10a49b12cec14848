"""allgather: every rank's tensor concatenated along the first dimension,
which may differ per rank (the other dimensions must match)."""
from horo.enqueue import allocated, checked_array, enqueue, enqueue_group, plain_call, refusing, tensor_name
from horo.handles import blocking, synchronize_all
from horo.tensors import as_array


def _enqueue(array, name, process_set, waits=False):
    if array.ndim == 0:
        array = array.reshape(1)
    return enqueue("allgather", name, array, None, allocated(array.dtype, array), process_set=process_set,
                   waits=waits)


def _start(tensor, name, process_set, waits):
    # `waits`: allgather() wants the result: returned instead of a handle (see allreduce._start).
    name = tensor_name(name, "allgather", process_set, waits)
    return _enqueue(checked_array(tensor, "allgather", name, process_set), name, process_set, waits)


def allgather_async(tensor, name=None, process_set=None):
    return _start(tensor, name, process_set, False)


_plain = plain_call("allgather")


def allgather(tensor, name=None, process_set=None):
    result = _plain(tensor, name, process_set)
    return result if result is not NotImplemented else _start(tensor, name, process_set, True)


def grouped_allgather_async(tensors, name=None, process_set=None):
    from horo.allreduce import group_names

    names = group_names(tensors, name, "grouped_allgather", process_set)
    with refusing("allgather", names, process_set):  # all checked before any is enqueued
        arrays = [as_array(t, n) for t, n in zip(tensors, names)]
    return enqueue_group(lambda a=a, n=n: _enqueue(a, n, process_set) for a, n in zip(arrays, names))


@blocking
def grouped_allgather(tensors, name=None, process_set=None):
    """Allgathers each tensor; enqueued together, they travel as one fused collective."""
    return synchronize_all(grouped_allgather_async(tensors, name, process_set))
