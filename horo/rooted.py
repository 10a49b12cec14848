"""Collectives with a root rank: gather to it, scatter from it, reduce to it.
Non-root ranks get None back from gather and reduce."""

from horo import basics, ops, process_sets
from horo.enqueue import allocated, enqueue, refusing, returning, tensor_name
from horo.handles import blocking, synchronize
from horo.tensors import as_array, empty, empty_like


def _at_least_1d(array):
    return array.reshape(1) if array.ndim == 0 else array


def gather_async(tensor, root_rank=0, name=None, process_set=None):
    name = tensor_name(name, "gather", process_set)
    with refusing("gather", name, process_set):
        array = _at_least_1d(as_array(tensor, name))
    finish = allocated(array.dtype, array)
    return enqueue("gather", name, array, None, lambda result: None if result is None else finish(result),
                   root=root_rank, process_set=process_set)


@blocking
def gather(tensor, root_rank=0, name=None, process_set=None):
    """On root_rank: every rank's tensor concatenated along the first dimension (which may differ per rank)."""
    return synchronize(gather_async(tensor, root_rank, name, process_set))


def scatter_async(tensor, root_rank=0, name=None, process_set=None):
    name = tensor_name(name, "scatter", process_set)
    with refusing("scatter", name, process_set):
        array = _at_least_1d(as_array(tensor, name))
    _, me, n = process_sets.resolve(process_set, name)
    rows = array.shape[0] // n + (1 if me < array.shape[0] % n else 0)
    output = empty((rows, *array.shape[1:]), array.dtype, like=array)
    return enqueue("scatter", name, array, output, returning(output),
                   root=root_rank, process_set=process_set)


@blocking
def scatter(tensor, root_rank=0, name=None, process_set=None):
    """Rank r receives its share of root_rank's first dimension (the first rows % size ranks one row more).

    Every rank passes a tensor of the same shape and dtype; only root_rank's values are read."""
    return synchronize(scatter_async(tensor, root_rank, name, process_set))


def reduce_async(tensor, root_rank=0, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0,
                 process_set=None):
    name = tensor_name(name, "reduce", process_set)
    op = ops.resolve(op, None, name)
    with refusing("reduce", name, process_set):
        array = as_array(tensor, name)
    output = empty_like(array)
    result = output if basics.rank() == root_rank else None
    return enqueue("reduce", name, array, output, returning(result), op, prescale_factor, postscale_factor,
                   root=root_rank, process_set=process_set)


@blocking
def reduce(tensor, root_rank=0, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """On root_rank: the reduction (Average by default) of every rank's tensor."""
    return synchronize(reduce_async(tensor, root_rank, op, name, prescale_factor, postscale_factor, process_set))
