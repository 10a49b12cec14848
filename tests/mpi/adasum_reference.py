"""NumPy reference of Adasum as Horovod defines it: ranks 2i and 2i+1 combined pairwise, then those
results pairwise, up a binary tree; each combination in float64, rounded once to the dtype."""
import numpy as np


def combine(a, b):
    """(1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b, a norm below 1e-8 leaving its coefficient at 1."""
    x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    dot, aa, bb = x @ y, x @ x, y @ y
    ca = 1.0 - dot / aa * 0.5 if aa >= 1e-8 else 1.0
    cb = 1.0 - dot / bb * 0.5 if bb >= 1e-8 else 1.0
    return (ca * a.astype(np.float64) + cb * b.astype(np.float64)).astype(a.dtype)


def adasum(per_rank):
    """Adasum of the list of every rank's array (a power-of-two count)."""
    level = list(per_rank)
    assert len(level) & (len(level) - 1) == 0, "Adasum's tree needs a power-of-two number of ranks"
    while len(level) > 1:
        level = [combine(level[2 * i], level[2 * i + 1]) for i in range(len(level) // 2)]
    return level[0]


def tolerance(dtype):
    """Rounding left to the summation order of the dot products: a few ulps of the dtype."""
    return {np.float16: 4e-3, np.float32: 1e-5, np.float64: 1e-12}[np.dtype(dtype).type]
