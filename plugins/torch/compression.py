"""Gradient compression for the allreduce: compress before, decompress after.

    hvd.DistributedOptimizer(opt, compression=hvd.Compression.fp16)

fp16 and bf16 halve the bytes on the wire for float32/float64 tensors (others pass
through); the reduction itself then runs in the half type, so expect about three
significant digits (fp16) or two (bf16) in the reduced gradients.
"""
import torch


class Compressor:
    """compress(tensor) -> (tensor to communicate, context); decompress(tensor, context) -> tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _HalfCompressor(Compressor):
    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != cls.wire_dtype:
            return tensor.to(cls.wire_dtype), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class FP16Compressor(_HalfCompressor):
    wire_dtype = torch.float16


class BF16Compressor(_HalfCompressor):
    wire_dtype = torch.bfloat16


class Compression:
    """The compressors, by Horovod's names (plus bf16)."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
