"""Collectives with a root rank: gather to it, scatter from it, reduce to it.
Non-root ranks get None back from gather and reduce."""

import numpy as np

from horo import basics, ops, process_sets
from horo.enqueue import allocated, checked_array, enqueue, plain_call, returning, tensor_name
from horo.tensors import empty, empty_like

# `waits` below: the blocking calls want the result, returned instead of a handle; unnamed, they
# take their collective's one name and run on the caller's thread (see allreduce._start).


def _at_least_1d(array):
    return array.reshape(1) if array.ndim == 0 else array


def _gather(tensor, root_rank, name, process_set, waits):
    name = tensor_name(name, "gather", process_set, waits)
    array = _at_least_1d(checked_array(tensor, "gather", name, process_set))
    finish = allocated(array.dtype, array)
    return enqueue("gather", name, array, None, lambda result: None if result is None else finish(result),
                   root=root_rank, process_set=process_set, waits=waits)


def gather_async(tensor, root_rank=0, name=None, process_set=None):
    return _gather(tensor, root_rank, name, process_set, False)


_plain_gather = plain_call("gather")


def gather(tensor, root_rank=0, name=None, process_set=None):
    """On root_rank: every rank's tensor concatenated along the first dimension (which may differ per rank)."""
    result = _plain_gather(tensor, name, process_set, root_rank)
    return result if result is not NotImplemented else _gather(tensor, root_rank, name, process_set, True)


def _scatter(tensor, root_rank, name, process_set, waits):
    name = tensor_name(name, "scatter", process_set, waits)
    array = _at_least_1d(checked_array(tensor, "scatter", name, process_set))
    _, me, n = process_sets.resolve(process_set, name)
    rows = array.shape[0] // n + (1 if me < array.shape[0] % n else 0)
    output = empty((rows, *array.shape[1:]), array.dtype, like=array)
    return enqueue("scatter", name, array, output, returning(output),
                   root=root_rank, process_set=process_set, waits=waits)


def scatter_async(tensor, root_rank=0, name=None, process_set=None):
    return _scatter(tensor, root_rank, name, process_set, False)


_plain_scatter = plain_call("scatter")


def scatter(tensor, root_rank=0, name=None, process_set=None):
    """Rank r receives its share of root_rank's first dimension (the first rows % size ranks one row more).

    Every rank passes a tensor of the same shape and dtype; only root_rank's values are read."""
    result = _plain_scatter(tensor, name, process_set, root_rank)
    return result if result is not NotImplemented else _scatter(tensor, root_rank, name, process_set, True)


def _reduce(tensor, root_rank, op, name, prescale_factor, postscale_factor, process_set, waits):
    name = tensor_name(name, "reduce", process_set, waits)
    op = ops.resolve(op, None, name)
    array = checked_array(tensor, "reduce", name, process_set)
    output = empty_like(array)
    result = output if basics.rank() == root_rank else None
    return enqueue("reduce", name, array, output, returning(result), op, prescale_factor, postscale_factor,
                   root=root_rank, process_set=process_set, waits=waits)


def reduce_async(tensor, root_rank=0, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0,
                 process_set=None):
    return _reduce(tensor, root_rank, op, name, prescale_factor, postscale_factor, process_set, False)


_plain_reduce = plain_call("reduce", default_op=ops.Average)


def reduce(tensor, root_rank=0, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """On root_rank: the reduction (Average by default) of every rank's tensor."""
    if type(tensor) is np.ndarray:
        result = _plain_reduce(tensor, name, process_set, root_rank, op, prescale_factor, postscale_factor,
                               empty_like(tensor))
        if result is not NotImplemented:
            return result
    return _reduce(tensor, root_rank, op, name, prescale_factor, postscale_factor, process_set, True)
