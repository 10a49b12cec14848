"""Whole-model helpers: broadcast_variables (initial weights from one rank), and
Python objects between ranks (broadcast_object, allgather_object)."""
import tensorflow as tf

import horo
from horo.enqueue import refusing
from horo.process_sets import global_process_set

from horo.tensorflow import core_ops
from horo.tensorflow.tensors import as_tensor, check_dtype, collective_name, variable_label


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False, name=None):
    """Assigns root_rank's value to every variable (tf.Variable or Keras variable), on every rank.

    One fused broadcast for all of them; eagerly it happens now, in a tf.function
    it returns the op that assigns them."""
    if isinstance(variables, (str, bytes)) or not hasattr(variables, "__iter__"):
        raise TypeError(f"broadcast_variables: variables must be a list of variables, got {type(variables).__name__}")
    variables = list(variables)
    if not variables:
        return None if tf.executing_eagerly() else tf.no_op()
    values = [as_tensor(v, "broadcast_variables") for v in variables]
    base = collective_name(name, "broadcast_variables", None, process_set)
    names = [f"{base}.{variable_label(v, i)}" for i, v in enumerate(variables)]
    with refusing("broadcast", names, process_set):
        for value, n in zip(values, names):
            check_dtype(value, n)
    received = core_ops.broadcast_group(values, names, root_rank, process_set)
    assigns = [v.assign(r) for v, r in zip(variables, received)]
    return None if tf.executing_eagerly() else tf.group(*assigns)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """root_rank's picklable `obj` on every rank (eagerly; `session` is ignored, TF1 only)."""
    return horo.broadcast_object(obj, root_rank, name=name, process_set=process_set)


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """The list of every rank's picklable `obj`, in rank order."""
    return horo.allgather_object(obj, name=name, process_set=process_set)
