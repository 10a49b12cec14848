"""The rest of horovod.tensorflow.keras's public names: its value-level collectives (Horovod's
Keras module takes and returns values, not graph tensors) and clear NotImplementedErrors."""
import horo.tensorflow as htf
from horo.not_implemented import not_implemented


def _value(tensor):
    return tensor.numpy() if hasattr(tensor, "numpy") else tensor


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
              compression=htf.Compression.none):
    """`value` reduced over every rank (Average by default), as a NumPy value."""
    return _value(htf.allreduce(value, average=average, compression=compression, op=op,
                                prescale_factor=prescale_factor, postscale_factor=postscale_factor, name=name))


def allgather(value, name=None):
    """Every rank's `value` concatenated along the first dimension, as a NumPy value."""
    return _value(htf.allgather(value, name=name))


def broadcast(value, root_rank, name=None):
    """root_rank's `value` on every rank, as a NumPy value."""
    return _value(htf.broadcast(value, root_rank, name=name))


def reducescatter(value, name=None, op=htf.Average):
    """This rank's share of the reduced `value`, as a NumPy value."""
    return _value(htf.reducescatter(value, op=op, name=name))


broadcast_global_variables = not_implemented(
    "horo.tensorflow.keras.broadcast_global_variables",
    "it needs TF1 global variables: use callbacks.BroadcastGlobalVariablesCallback(0) or "
    "hvd.broadcast_variables(model.variables, root_rank)")
PartialDistributedOptimizer = not_implemented(
    "horo.tensorflow.keras.PartialDistributedOptimizer",
    "use DistributedOptimizer (every layer's gradients are allreduced)")
