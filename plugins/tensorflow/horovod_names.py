"""The rest of horovod.tensorflow's public names: thin forms of what horo already does, with
Horovod's signatures (TF1 global variables and session hooks included)."""
import tensorflow as tf

from horo.process_sets import global_process_set
from horo.tensorflow import collectives
from horo.tensorflow.compression import Compression
from horo.tensorflow.functions import broadcast_object, broadcast_variables

import horo


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=horo.Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0, name=None,
                          ignore_name_scope=False):
    """Reduce-scatters each tensor, fused (Horovod's parameter order)."""
    return collectives.grouped_reducescatter(tensors, device_dense=device_dense, compression=compression, op=op,
                                             process_set=process_set, prescale_factor=prescale_factor,
                                             postscale_factor=postscale_factor, name=name,
                                             ignore_name_scope=ignore_name_scope)


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Assigns root_rank's values to `variables` in place. Returns the variables eagerly; in a
    graph, their assigned values (evaluating one runs the broadcast and the assignments)."""
    return broadcast_variables(variables, root_rank, process_set=process_set, inplace=True, name=name,
                               _values=True)


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function obj -> root_rank's obj (Horovod's form for repeated broadcasts)."""
    return lambda obj: broadcast_object(obj, root_rank, session, name, process_set)


def process_set_included_op(process_set_id=0, name=None):
    """1 (int32) when this rank belongs to the process set with this id, else 0."""
    from horo import process_sets

    found = process_sets.by_id(process_set_id)
    if found is None:
        raise horo.HoroValueError(f"process_set_included_op: no process set has id {process_set_id}")
    return tf.constant(1 if found.included() else 0, dtype=tf.int32, name=name)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False, backward_passes_per_step=1,
                         op=horo.Average, gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=global_process_set, scale_local_gradients=True):
    """Horovod's TensorFlow DistributedOptimizer: for a Keras optimizer, horo.tensorflow.keras's
    (the TF2 path Horovod takes too); TF1 `tf.compat.v1.train.Optimizer`s are not supported."""
    import keras

    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise NotImplementedError(
            f"horo.tensorflow.DistributedOptimizer wraps Keras optimizers; {type(optimizer).__name__} (a TF1 "
            "optimizer) is not supported in horo: use a keras.optimizers optimizer, or DistributedGradientTape")
    from horo.tensorflow.keras.optimizer import DistributedOptimizer as keras_distributed

    return keras_distributed(optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
                             gradient_predivide_factor=gradient_predivide_factor, op=op,
                             backward_passes_per_step=backward_passes_per_step,
                             average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
                             groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)


def broadcast_global_variables(root_rank, process_set=global_process_set):
    """TF1 graphs: the op that assigns root_rank's values to every global variable (Horovod's).

    Eagerly (TF2) there is no collection of global variables, so, as Horovod, this raises a
    RuntimeError saying what to call instead."""
    if tf.executing_eagerly():
        raise RuntimeError("hvd.broadcast_global_variables() does not support eager execution (TF2 has no global "
                           "variables): use hvd.broadcast_variables(model.variables + optimizer.variables, root_rank), "
                           "or horo.tensorflow.keras.callbacks.BroadcastGlobalVariablesCallback with model.fit")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank, process_set=process_set)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """TF1 MonitoredTrainingSession hook: broadcasts the global variables from root_rank once the
    session is created (Horovod's)."""

    def __init__(self, root_rank, device="", process_set=global_process_set):
        super().__init__()
        self.root_rank, self.device, self.process_set = root_rank, device, process_set
        self.bcast_op = None

    def begin(self):
        if self.bcast_op is None or self.bcast_op.graph != tf.compat.v1.get_default_graph():
            self.bcast_op = broadcast_global_variables(self.root_rank, self.process_set)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)


def gpu_available(ext_base_name="tensorflow", verbose=False):
    """Whether horo can run this framework's collectives on GPU tensors (Horovod's helper).
    horo.tensorflow moves host memory, so for "tensorflow" this is False even with a GPU."""
    if ext_base_name == "tensorflow":
        return False
    if ext_base_name == "torch":
        from horo.gpu import gpu_available as core_sees_a_gpu

        return bool(core_sees_a_gpu())
    return False
