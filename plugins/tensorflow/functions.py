"""Whole-model helpers: broadcast_variables (initial weights from one rank), and
Python objects between ranks (broadcast_object, allgather_object)."""
import tensorflow as tf

import horo
from horo.enqueue import refusing
from horo.process_sets import global_process_set

from horo.tensorflow import core_ops
from horo.tensorflow.tensors import as_tensor, check_dtype, collective_name, from_wire, to_wire, variable_label


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False, name=None,
                        _values=False):
    """Assigns root_rank's value to every variable (tf.Variable or Keras variable), on every rank.

    One fused broadcast for all of them; eagerly it happens now, in a tf.function
    it returns the op that assigns them."""
    if isinstance(variables, (str, bytes)) or not hasattr(variables, "__iter__"):
        raise TypeError(f"broadcast_variables: variables must be a list of variables, got {type(variables).__name__}")
    variables = list(variables)
    if not variables:
        return [] if _values else None if tf.executing_eagerly() else tf.no_op()
    values = [as_tensor(v, "broadcast_variables") for v in variables]
    base = collective_name(name, "broadcast_variables", None, process_set)
    names = [f"{base}.{variable_label(v, i)}" for i, v in enumerate(variables)]
    with refusing("broadcast", names, process_set):
        for value, n in zip(values, names):
            check_dtype(value, n, moves=True)
    wired = [to_wire(v) for v in values]
    received = core_ops.broadcast_group([w for w, _ in wired], names, root_rank, process_set)
    received = [from_wire(r, dtype) for r, (_, dtype) in zip(received, wired)]
    if _values and not tf.executing_eagerly():
        # The assigned values, which run the assignment when evaluated: a graph reading the
        # variable instead would see its old value, since nothing would run the assign op.
        return [v.assign(r, read_value=True) for v, r in zip(variables, received)]
    assigns = [v.assign(r) for v, r in zip(variables, received)]
    if _values:
        return variables
    return None if tf.executing_eagerly() else tf.group(*assigns)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """root_rank's picklable `obj` on every rank (eagerly; `session` is ignored, TF1 only)."""
    return horo.broadcast_object(obj, root_rank, name=name, process_set=process_set)


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """The list of every rank's picklable `obj`, in rank order."""
    return horo.allgather_object(obj, name=name, process_set=process_set)
