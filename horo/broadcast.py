"""broadcast: every rank ends with root_rank's tensor."""

from horo.enqueue import enqueue, refusing, returning, tensor_name
from horo.handles import blocking, synchronize
from horo.tensors import as_array, empty_like


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    name = tensor_name(name, "broadcast", process_set)
    with refusing("broadcast", name, process_set):
        array = as_array(tensor, name)
    output = empty_like(array)
    return enqueue("broadcast", name, array, output, returning(output), root=root_rank, process_set=process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    name = tensor_name(name, "broadcast", process_set)
    with refusing("broadcast", name, process_set):
        array = as_array(tensor, name, in_place=True)
    return enqueue("broadcast", name, array, array, returning(tensor), root=root_rank, process_set=process_set)


@blocking
def broadcast(tensor, root_rank, name=None, process_set=None):
    """Returns a new array holding root_rank's `tensor`."""
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


@blocking
def broadcast_(tensor, root_rank, name=None, process_set=None):
    """Overwrites `tensor` with root_rank's, in place, and returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))
