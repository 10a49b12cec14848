"""Gradient compression around a collective, as in Horovod: `compress` before
sending, `decompress` after, with a context in between. The framework plugins
(horo.torch, horo.tensorflow) say how their tensors are cast."""


class Compressor:
    """Interface: compress(tensor) -> (tensor to communicate, ctx); decompress(tensor, ctx) -> tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class CastCompressor(Compressor):
    """Sends floating-point tensors as `wire_dtype` (fp16/bf16: half the bytes) and casts
    the result back; other tensors pass through. The reduction itself then runs in
    the narrow type. Subclasses give wire_dtype, is_floating(tensor) and cast(tensor, dtype)."""

    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        if cls.is_floating(tensor) and tensor.dtype != cls.wire_dtype:
            return cls.cast(tensor, cls.wire_dtype), tensor.dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        return tensor if ctx is None else cls.cast(tensor, ctx)
