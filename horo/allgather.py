"""allgather: every rank's tensor concatenated along the first dimension,
which may differ per rank (the other dimensions must match)."""
from horo.enqueue import allocated, enqueue, refusing, tensor_name
from horo.handles import synchronize, synchronize_all
from horo.tensors import as_array


def allgather_async(tensor, name=None, process_set=None):
    name = tensor_name(name, "allgather", process_set)
    with refusing("allgather", name, process_set):
        array = as_array(tensor, name)
    if array.ndim == 0:
        array = array.reshape(1)
    return enqueue("allgather", name, array, None, allocated(array.dtype, array), process_set=process_set)


def allgather(tensor, name=None, process_set=None):
    return synchronize(allgather_async(tensor, name, process_set))


def grouped_allgather_async(tensors, name=None, process_set=None):
    base = tensor_name(name, "grouped_allgather", process_set)
    return [allgather_async(t, f"{base}.{i}", process_set) for i, t in enumerate(tensors)]


def grouped_allgather(tensors, name=None, process_set=None):
    """Allgathers each tensor; enqueued together, they travel as one fused collective."""
    return synchronize_all(grouped_allgather_async(tensors, name, process_set))
