"""Gradient compression applied around a collective, as in Horovod:
`compress` before sending, `decompress` after, with a context in between."""
import tensorflow as tf

from horo.compression import CastCompressor, Compressor, NoneCompressor  # noqa: F401 - Horovod's names


class FP16Compressor(CastCompressor):
    """Sends floating-point tensors as float16 (half the bytes), restoring their dtype after."""

    wire_dtype = tf.float16

    @staticmethod
    def is_floating(tensor):
        return tensor.dtype.is_floating

    @staticmethod
    def cast(tensor, dtype):
        return tf.cast(tensor, dtype)


class Compression:
    """Horovod's names: hvd.Compression.none, hvd.Compression.fp16."""

    none = NoneCompressor
    fp16 = FP16Compressor
