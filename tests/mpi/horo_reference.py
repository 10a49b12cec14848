"""NumPy reference for horo's reductions, and the test data the rank suites feed it.

Every rank builds the inputs of *all* ranks from seeds (a case key and the rank
number), so each rank can compute the expected result locally; nothing but the
result digests has to travel between ranks.

The reference follows tests' reading of the API spec:
- integers: Sum/Min/Max/Product exact, wrapping like NumPy; Average is
  ``rint(sum.astype(float64) * (1/size))`` (round half to even);
  pre/postscale are ``rint(x.astype(float64) * factor)``;
- floats: reductions and scaling in the dtype's own arithmetic, float16 and
  bfloat16 via float32 and then rounded (which is what NumPy and ml_dtypes do
  for element-wise ufuncs on those dtypes).

Where the order of a floating-point Sum/Product is free (np >= 3) the result
is compared with a tolerance; the data kinds below are chosen so that many
float cases are nevertheless exact in every order (small multiples of 1/4).
"""
import hashlib
import math
import zlib

import ml_dtypes
import numpy as np

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
INT_DTYPES = ["uint8", "int8", "int16", "int32", "int64"]
FLOAT_DTYPES = ["float16", "bfloat16", "float32", "float64"]
DTYPES = INT_DTYPES + FLOAT_DTYPES
OPS = ["Sum", "Average", "Min", "Max", "Product"]

_UFUNC = {
    "Sum": np.add,
    "Average": np.add,
    "Min": np.minimum,
    "Max": np.maximum,
    "Product": np.multiply,
}


def np_dtype(name):
    return BFLOAT16 if name == "bfloat16" else np.dtype(name)


def dtype_name(dt):
    dt = np.dtype(dt)
    return "bfloat16" if dt == BFLOAT16 else dt.name


def is_int(dt):
    return np.dtype(dt).kind in "iu"


def is_half(dt):
    dt = np.dtype(dt)
    return dt == BFLOAT16 or dt == np.float16


def finfo(dt):
    dt = np.dtype(dt)
    return ml_dtypes.finfo(dt) if dt == BFLOAT16 else np.finfo(dt)


def kinds_for(dtype):
    """Two data kinds per dtype: (first kind, second kind).

    ints:   "wide"  = full range (Average: range where the sum cannot wrap),
            "narrow" = tiny values (many rounding ties for Average).
    floats: "exact" = multiples of 1/4 (or of 1/2 for Product): every sum and
            product is exact in any order, so results must equal NumPy bit for bit;
            "random" = uniform random values: exact only where the order is fixed.
    """
    return ("wide", "narrow") if is_int(np_dtype(dtype)) else ("exact", "random")


def seed_of(*parts):
    return zlib.crc32(repr(parts).encode())


def _one_input(rng, dt, n, op, kind, size):
    if is_int(dt):
        info = np.iinfo(dt)
        if kind == "wide":
            lo, hi = int(info.min), int(info.max)
            if op == "Average":  # keep the sum inside the dtype: no wrap ambiguity
                lo = max(lo // size, -(2**50))
                hi = min(hi // size, 2**50)
        elif kind == "narrow":
            lo, hi = (0, 6) if info.min == 0 else (-6, 6)
        elif kind == "scale":  # small enough that x*1.5 summed over 4 ranks and *2 fits int8
            lo, hi = (0, 10) if info.min == 0 else (-10, 10)
        else:
            raise ValueError(kind)
        return rng.integers(lo, hi, size=n, endpoint=True, dtype=dt)
    if kind in ("exact", "scale"):
        if op == "Product":
            vals = rng.choice(np.array([-2.0, -1.5, -1.0, -0.5, 0.5, 1.0, 1.5, 2.0]), size=n)
        else:
            vals = rng.integers(-32, 32, size=n, endpoint=True) / 4.0
    elif kind == "random":
        if op == "Product":
            vals = rng.choice(np.array([-1.0, 1.0]), size=n) * rng.uniform(0.5, 2.0, size=n)
        else:
            vals = rng.uniform(-1.0, 1.0, size=n)
    else:
        raise ValueError(kind)
    return vals.astype(dt)


def make_rank_inputs(key, dtype, shape, op, kind, size):
    """The inputs of ranks 0..size-1 for one case (deterministic in key)."""
    dt = np_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    out = []
    for r in range(size):
        rng = np.random.default_rng([seed_of(key), r])
        out.append(np.ascontiguousarray(_one_input(rng, dt, n, op, kind, size).reshape(shape)))
    return out


def scale(x, factor):
    """x * factor in the dtype's arithmetic, as the spec defines it."""
    x = np.asarray(x)
    dt = x.dtype
    if factor == 1.0:
        return x.copy()
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        if is_int(dt):
            # Horovod's rule: scale in float64, cast back (truncating toward zero).
            y = np.trunc(x.astype(np.float64) * factor).astype(dt)
        elif is_half(dt):
            y = (x.astype(np.float32) * np.float32(factor)).astype(dt)
        elif dt == np.float32:
            y = x * np.float32(factor)
        else:
            y = x * np.float64(factor)
    return np.asarray(y, dtype=dt).reshape(x.shape)


def reference(inputs, op, prescale=1.0, postscale=1.0):
    """The expected allreduce result of inputs (one array per rank)."""
    size = len(inputs)
    dt = inputs[0].dtype
    shape = inputs[0].shape
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        xs = [scale(x, prescale) for x in inputs]
        acc = xs[0].copy()
        for x in xs[1:]:
            acc = np.asarray(_UFUNC[op](acc, x), dtype=dt)
        if op == "Average" and dt == np.float32 and postscale == 1.0:
            acc = acc / np.float32(size)  # the correctly rounded quotient, as the core divides
        elif op == "Average":
            acc = scale(acc, 1.0 / size)
        acc = scale(acc, postscale)
    return np.asarray(acc, dtype=dt).reshape(shape)


def _pow2(f):
    m, _ = math.frexp(abs(float(f)))
    return f != 0 and m == 0.5


def must_be_exact(dtype, op, kind, size, prescale=1.0, postscale=1.0):
    """True when the spec pins the result down bit for bit (so it must equal NumPy)."""
    dt = np_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    if is_int(dt):
        return True
    if not (_pow2(prescale) and _pow2(postscale)):
        return False  # e.g. float32 * 0.1: float32 or float64 multiply both fit the spec
    if op in ("Min", "Max"):
        return True
    if kind in ("exact", "scale"):
        # Sums of quarters in [-8, 8] and products of {+-0.5, +-1, +-1.5, +-2} are exact in any order
        # while every partial result fits the significand (32*size quarters; 3**size, with 2**-size
        # still normal); then only 1/size can round. bfloat16 runs out of bits at np=9 (seen at np=16).
        bits = finfo(dt).nmant + 1
        fits = (3**size <= 2**bits and size <= -finfo(dt).minexp) if op == "Product" else 32 * size <= 2**bits
        return fits and (op != "Average" or _pow2(size) or (dt == np.float32 and postscale == 1.0))
    return size <= 2  # two operands: a single, commutative rounding


def tolerance(inputs, op, prescale=1.0, postscale=1.0):
    """(float64 reference, allowed absolute deviation per element) for inexact cases."""
    size = len(inputs)
    dt = inputs[0].dtype
    eps = float(finfo(dt).eps)
    tiny = float(finfo(dt).smallest_subnormal)
    xs = [x.astype(np.float64) * prescale for x in inputs]
    if op in ("Sum", "Average"):
        ref = np.sum(xs, axis=0)
        mag = np.sum(np.abs(xs), axis=0)
        if op == "Average":
            ref = ref / size
            mag = mag / size
    elif op == "Product":
        ref = np.prod(xs, axis=0)
        mag = np.abs(ref)
    elif op == "Min":
        ref = np.min(xs, axis=0)
        mag = np.abs(ref)
    else:
        ref = np.max(xs, axis=0)
        mag = np.abs(ref)
    ref = ref * postscale
    mag = mag * abs(postscale)
    tol = (size + 3) * eps * mag + (size + 3) * tiny
    return ref.reshape(inputs[0].shape), tol.reshape(inputs[0].shape)


def digest(arr):
    arr = np.asarray(arr)
    h = hashlib.sha256()
    h.update(dtype_name(arr.dtype).encode())
    h.update(repr(arr.shape).encode())
    h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()[:24]


def _first_differences(result, expected, limit=5):
    r = np.asarray(result).reshape(-1)
    e = np.asarray(expected).reshape(-1)
    rb = r.view(np.uint8).reshape(r.size, -1) if r.size else r
    eb = e.view(np.uint8).reshape(e.size, -1) if e.size else e
    bad = np.nonzero(np.any(rb != eb, axis=1))[0] if r.size else []
    return ", ".join(f"[{i}] got {r[i]!r} expected {e[i]!r}" for i in bad[:limit]) + (
        f" ... ({len(bad)} elements differ)" if len(bad) else ""
    )


def check_result(result, inputs, op, exact, prescale=1.0, postscale=1.0, what=""):
    """Assert result is the allreduce of inputs; returns (exact, tol or None)."""
    expected = reference(inputs, op, prescale, postscale)
    result = np.asarray(result)
    assert isinstance(result, np.ndarray), f"{what}: result is {type(result)}, not an ndarray"
    assert result.dtype == expected.dtype, f"{what}: dtype {result.dtype} != {expected.dtype}"
    assert result.shape == expected.shape, f"{what}: shape {result.shape} != {expected.shape}"
    if exact:
        assert result.tobytes() == expected.tobytes(), (
            f"{what}: result differs from the NumPy reference: {_first_differences(result, expected)}"
        )
        return True, None
    ref64, tol = tolerance(inputs, op, prescale, postscale)
    got = result.astype(np.float64)
    err = np.abs(got - ref64)
    bad = np.nonzero((err > tol).reshape(-1))[0]
    assert len(bad) == 0, (
        f"{what}: {len(bad)} elements outside the tolerance, e.g. "
        + ", ".join(
            f"[{i}] got {got.reshape(-1)[i]!r} expected {ref64.reshape(-1)[i]!r} tol {tol.reshape(-1)[i]:.3g}"
            for i in bad[:5]
        )
    )
    return False, tol
