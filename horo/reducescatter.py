"""reducescatter: reduce across ranks, then rank r keeps its share of the first
dimension (the first rows % size ranks get one row more, as in Horovod)."""
import numpy as np

from horo import basics, ops
from horo.enqueue import enqueue, returning, tensor_name
from horo.handles import synchronize, synchronize_all
from horo.tensors import as_array


def reducescatter_async(tensor, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0):
    name = tensor_name(name, "reducescatter")
    op = ops.resolve(op, None, name)
    array = as_array(tensor, name)
    if array.ndim == 0:
        array = array.reshape(1)
    n, me = basics.size(), basics.rank()
    rows = array.shape[0] // n + (1 if me < array.shape[0] % n else 0)
    output = np.empty((rows, *array.shape[1:]), dtype=array.dtype)
    return enqueue("reducescatter", name, array, output, returning(output), op, prescale_factor, postscale_factor)


def reducescatter(tensor, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0):
    return synchronize(reducescatter_async(tensor, op, name, prescale_factor, postscale_factor))


def grouped_reducescatter_async(tensors, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0):
    base = tensor_name(name, "grouped_reducescatter")
    return [
        reducescatter_async(t, op, f"{base}.{i}", prescale_factor, postscale_factor) for i, t in enumerate(tensors)
    ]


def grouped_reducescatter(tensors, op=None, name=None, prescale_factor=1.0, postscale_factor=1.0):
    """Reduce-scatters each tensor; enqueued together, they travel as one fused collective."""
    return synchronize_all(grouped_reducescatter_async(tensors, op, name, prescale_factor, postscale_factor))
