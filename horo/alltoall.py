"""alltoall: rank r sends splits[j] rows of its tensor to rank j and receives
what every rank sent it, concatenated in rank order."""
from horo import process_sets
from horo.enqueue import allocated, enqueue, tensor_name
from horo.handles import synchronize
from horo.tensors import as_array


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    name = tensor_name(name, "alltoall", process_set)
    array = as_array(tensor, name)
    if array.ndim == 0:
        array = array.reshape(1)
    n = process_sets.resolve(process_set, name)[2]
    if splits is None:
        rows = array.shape[0]
        send = [rows // n + (1 if r < rows % n else 0) for r in range(n)]
    else:
        # Checked by the coordinator, so a bad split fails every rank, not just this one.
        send = [int(s) for s in splits]
    want_splits = splits is not None
    rows_of = allocated(array.dtype, array)

    def finish(core_result):
        output = rows_of(core_result)
        return (output, core_result[2]) if want_splits else output

    return enqueue("alltoall", name, array, None, finish, splits=send, process_set=process_set)


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Returns the received rows; with `splits` given, also how many came from each rank."""
    return synchronize(alltoall_async(tensor, splits, name, process_set))
