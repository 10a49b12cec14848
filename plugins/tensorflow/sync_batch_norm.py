"""SyncBatchNormalization: Keras's BatchNormalization whose batch statistics cover every rank's batch.

Each rank sums its inputs and their squares over the reduced axes, with the element count, and
one grouped Sum-allreduce makes them global: mean = sum / count, variance = E[x^2] - mean^2 (as
Horovod computes them), so a layer on a rank's share of a batch normalizes (and updates its
moving statistics) exactly as BatchNormalization would on the whole batch. The allreduce is
differentiable (its gradient is the Sum-allreduce of the upstream gradients), so training
backpropagates through the global statistics. Every rank must call the layer the same number
of times, in training, as with any collective.
"""
import keras
import tensorflow as tf

import horo
from horo.process_sets import global_process_set


@keras.saving.register_keras_serializable(package="horo")
class SyncBatchNormalization(keras.layers.BatchNormalization):
    """Horovod's hvd.SyncBatchNormalization (Keras 3, TensorFlow backend); BatchNormalization's arguments."""

    def __init__(self, fused=False, process_set=global_process_set, **kwargs):
        if fused:
            raise ValueError("SyncBatchNormalization does not support fused=True (as in Horovod)")
        super().__init__(**kwargs)
        self._process_set = process_set

    def _moments(self, inputs, mask):
        from horo.tensorflow import collectives

        axes = list(self._reduction_axes)
        if mask is None:
            weights = None
            count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(inputs), axes)), inputs.dtype)
        else:  # a masked step counts only its unmasked positions
            weights = tf.cast(tf.broadcast_to(tf.expand_dims(mask, -1), tf.shape(inputs)), inputs.dtype)
            count = tf.reduce_sum(weights, axis=axes, keepdims=True)
        weighted = inputs if weights is None else inputs * weights
        local = [tf.reduce_sum(weighted, axis=axes, keepdims=True),
                 tf.reduce_sum(weighted * inputs, axis=axes, keepdims=True),
                 tf.reshape(count, [-1]) if weights is None else count]
        total, squares, n = collectives.grouped_allreduce(local, op=horo.Sum, process_set=self._process_set)
        if weights is None:
            n = tf.reshape(n, [])
        mean = total / n
        variance = tf.maximum(squares / n - tf.square(mean), 0.0)
        return tf.squeeze(mean, axis=axes), tf.squeeze(variance, axis=axes)

    def get_config(self):
        return super().get_config()  # the process set is the job's business, not the saved model's
