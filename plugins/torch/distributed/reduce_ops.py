"""torch.distributed.ReduceOp -> horo's reduction, or the local fold used where horo has none.

horo reduces SUM, AVG, MIN, MAX and PRODUCT itself; PREMUL_SUM is horo's Sum with a
prescale factor. The bitwise ops (BAND, BOR, BXOR) have no horo kernel: they are
done by an allgather and a fold on each rank, for integer and bool tensors only.
"""
import torch
import torch.distributed as dist

from horo import ops

_RED = dist.ReduceOp.RedOpType
_HORO = {_RED.SUM: ops.Sum, _RED.AVG: ops.Average, _RED.MIN: ops.Min, _RED.MAX: ops.Max,
         _RED.PRODUCT: ops.Product, _RED.PREMUL_SUM: ops.Sum}
_BITWISE = {_RED.BAND: torch.bitwise_and, _RED.BOR: torch.bitwise_or, _RED.BXOR: torch.bitwise_xor}
_INTEGER = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)


class Reduction:
    """What one ReduceOp means for horo: `op` and `prescale` for horo's kernels, or `fold`
    (a binary torch op) for the allgather-and-fold path."""

    __slots__ = ("kind", "op", "prescale", "fold")

    def __init__(self, kind, op=None, prescale=1.0, fold=None):
        self.kind, self.op, self.prescale, self.fold = kind, op, prescale, fold


_PLAIN = {kind: Reduction(kind, op=op) for kind, op in _HORO.items() if kind != _RED.PREMUL_SUM}


def plain_reduction(reduce_op):
    """The Reduction of SUM, AVG, MIN, MAX or PRODUCT on non-bool tensors, else None (then reduction())."""
    return _PLAIN.get(getattr(reduce_op, "op", reduce_op))


def reduction(reduce_op, tensors, collective):
    """The Reduction for `reduce_op` applied to `tensors` in `collective`; raises naming what is unsupported."""
    kind = getattr(reduce_op, "op", reduce_op)
    plain = _PLAIN.get(kind)
    if plain is not None and not any(t.dtype == torch.bool for t in tensors):  # every call's path: one lookup
        return plain
    if kind in _BITWISE:
        bad = [t.dtype for t in tensors if t.dtype not in _INTEGER]
        if bad:
            raise TypeError(f"horo backend: {collective} with ReduceOp.{kind.name} needs integer or bool tensors, "
                            f"got {bad[0]}")
        return Reduction(kind, fold=_BITWISE[kind])
    if kind not in _HORO:
        raise NotImplementedError(f"horo backend: {collective} does not support ReduceOp.{getattr(kind, 'name', kind)}")
    prescale = 1.0
    if kind == _RED.PREMUL_SUM:
        factor = getattr(reduce_op, "factor", None)
        if factor is None:
            raise NotImplementedError(f"horo backend: {collective}: PREMUL_SUM without a factor")
        prescale = float(factor.item() if isinstance(factor, torch.Tensor) else factor)
    if any(t.dtype == torch.bool for t in tensors):
        # horo moves bool but never reduces it; on bool, SUM/MAX are OR and MIN/PRODUCT are AND.
        fold = torch.logical_or if kind in (_RED.SUM, _RED.MAX, _RED.AVG) else torch.logical_and
        return Reduction(kind, fold=fold)
    return Reduction(kind, op=_HORO[kind], prescale=prescale)


def fold_gathered(gathered, fold, size):
    """Folds the [size * rows, ...] result of an allgather into one rank's worth of rows."""
    parts = gathered.chunk(size) if size > 0 else []
    result = parts[0].clone()
    for part in parts[1:]:
        result = fold(result, part)
    return result
