"""Gradient compression for the allreduce: compress before, decompress after.

    hvd.DistributedOptimizer(opt, compression=hvd.Compression.fp16)

fp16 and bf16 halve the bytes on the wire for float32/float64 tensors (others pass
through); the reduction itself then runs in the half type, so expect about three
significant digits (fp16) or two (bf16) in the reduced gradients.
"""
import torch

from horo.compression import CastCompressor, Compressor, NoneCompressor  # noqa: F401 - Horovod's names


class _TorchCast(CastCompressor):
    @staticmethod
    def is_floating(tensor):
        return tensor.dtype.is_floating_point

    @staticmethod
    def cast(tensor, dtype):
        return tensor.to(dtype)


class FP16Compressor(_TorchCast):
    wire_dtype = torch.float16


class BF16Compressor(_TorchCast):
    wire_dtype = torch.bfloat16


class Compression:
    """The compressors, by Horovod's names (plus bf16)."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
