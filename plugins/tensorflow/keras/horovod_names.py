"""The rest of horovod.tensorflow.keras's public names: its value-level collectives (Horovod's
Keras module takes and returns values, not graph tensors)."""
import horo.tensorflow as htf


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


def broadcast_global_variables(root_rank):
    """Horovod's Keras form runs the TF1 broadcast op in Keras's session; Keras 3 has neither, so,
    as Horovod under TF2, this raises a RuntimeError saying what to call instead."""
    raise RuntimeError("horo.tensorflow.keras.broadcast_global_variables() needs TF1 global variables and a Keras "
                       "session, which Keras 3 does not have: use callbacks.BroadcastGlobalVariablesCallback("
                       f"{root_rank}) with model.fit, or hvd.broadcast_variables(model.variables, {root_rank})")
