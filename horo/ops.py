"""Reduction ops, numbered as in Horovod so ported scripts keep working."""
from horo.errors import HoroValueError

Average = 0
Sum = 1
Adasum = 2  # allreduce only: float16/32/64, a power-of-two number of ranks (csrc/collectives/adasum.h)
Min = 3
Max = 4
Product = 5

_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max", Product: "Product"}


def resolve(op, average, tensor_name, adasum=False):
    """Horovod's rules: `op` wins; the deprecated `average=` flag maps to Average/Sum.
    `adasum`: the caller is an allreduce, the one collective Adasum is defined for."""
    if op is not None and average is not None:
        raise HoroValueError(f"'{tensor_name}': pass either op= or the deprecated average=, not both")
    if op is None:
        op = Sum if average is False else Average
    if op not in _NAMES:
        raise HoroValueError(f"'{tensor_name}': unsupported reduction op {op!r} (use horo.Sum, Average, Adasum, Min, Max or Product)")
    if op == Adasum and not adasum:
        raise HoroValueError(f"'{tensor_name}': op Adasum is an allreduce op; this collective takes Sum, Average, "
                             "Min, Max or Product")
    return op
