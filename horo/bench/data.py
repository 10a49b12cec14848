"""Integer-valued, rank-dependent inputs and their exact NumPy references.

Values are small whole numbers (1..11; 1..2 for products), so sums, minima, maxima and
products over a handful of ranks are exact in every dtype horo supports, in any order.
"""
import numpy as np

DTYPES = ("uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64")
OPS = {"sum": "Sum", "avg": "Average", "average": "Average", "min": "Min", "max": "Max",
       "prod": "Product", "product": "Product"}


def numpy_dtype(name):
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise SystemExit("--dtype bfloat16 needs the ml_dtypes package (pip install ml-dtypes)")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def canonical_op(name):
    key = name.lower()
    if key not in OPS:
        raise ValueError(f"unknown op {name!r} (one of {', '.join(sorted(OPS))})")
    return OPS[key]


def pattern(count, rank, dtype, op="Sum", offset=0):
    """Elements offset..offset+count-1 of rank `rank`'s input."""
    idx = np.arange(offset, offset + count, dtype=np.int64)
    if op == "Product":
        vals = (idx + rank) % 2 + 1
    else:
        vals = (idx * 3 + rank * 7) % 11 + 1
    return vals.astype(dtype)


def reduced(count, nranks, dtype, op, offset=0):
    """The exact result of reducing every rank's pattern with `op`, as float64."""
    acc = pattern(count, 0, np.float64, op, offset)
    for r in range(1, nranks):
        x = pattern(count, r, np.float64, op, offset)
        if op in ("Sum", "Average"):
            acc = acc + x
        elif op == "Min":
            acc = np.minimum(acc, x)
        elif op == "Max":
            acc = np.maximum(acc, x)
        elif op == "Product":
            acc = acc * x
    if op == "Average":
        acc = acc / nranks
    return acc


def count_wrong(got, expected, dtype, op):
    """Number of elements of `got` that differ from `expected` (float64); Average allows rounding."""
    got = np.asarray(got).reshape(-1)
    if got.size != expected.size:
        return max(got.size, expected.size)
    if op == "Average":
        g = got.astype(np.float64)
        if np.dtype(dtype).kind in "iu":
            ok = np.abs(g - expected) <= 1.0
        else:
            rtol = {2: 1e-2, 4: 1e-6, 8: 1e-12}[np.dtype(dtype).itemsize]
            ok = np.isclose(g, expected, rtol=rtol, atol=0)
        return int(got.size - np.count_nonzero(ok))
    want = expected.astype(dtype)
    return int(got.size - np.count_nonzero(got == want))
