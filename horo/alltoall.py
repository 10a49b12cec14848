"""alltoall: rank r sends splits[j] rows of its tensor to rank j and receives
what every rank sent it, concatenated in rank order."""
import numpy as np

from horo import process_sets
from horo.enqueue import allocated, checked_array, enqueue, plain_call, tensor_name
from horo.errors import HoroValueError


def split_counts(splits, name):
    """`splits` (a list, NumPy array or tensor of integers) as a list of ints; floats and bools are refused."""
    array = np.asarray(splits.cpu() if hasattr(splits, "cpu") else splits)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise HoroValueError(f"'{name}': splits must be a 1-d sequence of integers, got {array.dtype} "
                             f"with shape {array.shape}")
    return [int(s) for s in array]


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    return _start(tensor, splits, name, process_set, False)


def _start(tensor, splits, name, process_set, waits):
    # `waits`: alltoall() wants the result: returned instead of a handle (see allreduce._start).
    name = tensor_name(name, "alltoall", process_set, waits)
    array = checked_array(tensor, "alltoall", name, process_set)
    if array.ndim == 0:
        array = array.reshape(1)
    n = process_sets.set_size(process_set, name)
    # Checked by the coordinator, so a bad split fails every rank, not just this one.
    if splits is None:
        # Even parts, as Horovod; rows that do not divide go as no splits, which the coordinator refuses.
        rows = array.shape[0]
        send = [rows // n] * n if rows % n == 0 else []
    else:
        send = split_counts(splits, name)
    rows_of = allocated(array.dtype, array)
    if splits is None:
        return enqueue("alltoall", name, array, None, rows_of, splits=send, process_set=process_set, waits=waits)
    return enqueue("alltoall", name, array, None, lambda core_result: (rows_of(core_result), core_result[2]),
                   splits=send, process_set=process_set, waits=waits)


_plain = plain_call("alltoall")  # even parts only


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Returns the received rows; with `splits` given, also how many came from each rank."""
    result = NotImplemented if splits is not None else _plain(tensor, name, process_set)
    return result if result is not NotImplemented else _start(tensor, splits, name, process_set, True)
