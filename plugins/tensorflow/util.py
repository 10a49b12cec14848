"""Horovod's horovod.tensorflow.util helpers that scripts (and Horovod's own tests) reach for."""
import tensorflow as tf


def _executing_eagerly():
    """True when TensorFlow runs eagerly (Horovod's name for tf.executing_eagerly)."""
    return tf.executing_eagerly()
