"""broadcast: every rank ends with root_rank's tensor."""
import numpy as np

from horo.enqueue import checked_array, enqueue, plain_call, returning, tensor_name
from horo.tensors import empty_like


def _start(tensor, root_rank, name, process_set, in_place, waits):
    # `waits`: the blocking calls want the result: returned instead of a handle (see allreduce._start).
    name = tensor_name(name, "broadcast", process_set, waits)
    array = checked_array(tensor, "broadcast", name, process_set, in_place)
    if in_place:
        output, result = array, tensor  # the caller's own object comes back (a DLPack/buffer view writes through)
    else:
        output = result = empty_like(array)
    return enqueue("broadcast", name, array, output, returning(result), root=root_rank, process_set=process_set,
                   waits=waits)


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    return _start(tensor, root_rank, name, process_set, False, False)


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    return _start(tensor, root_rank, name, process_set, True, False)


_plain = plain_call("broadcast")
_plain_in_place = plain_call("broadcast", in_place=True)


def broadcast(tensor, root_rank, name=None, process_set=None):
    """Returns a new array holding root_rank's `tensor`."""
    if type(tensor) is np.ndarray:  # the output made here, as the full path makes it
        result = _plain(tensor, name, process_set, root_rank, None, 1.0, 1.0, empty_like(tensor))
        if result is not NotImplemented:
            return result
    return _start(tensor, root_rank, name, process_set, False, True)


def broadcast_(tensor, root_rank, name=None, process_set=None):
    """Overwrites `tensor` with root_rank's, in place, and returns it."""
    result = _plain_in_place(tensor, name, process_set, root_rank)
    return result if result is not NotImplemented else _start(tensor, root_rank, name, process_set, True, True)
