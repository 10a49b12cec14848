"""NumPy dtype <-> the core's dtype codes (csrc/common/types.h)."""
import numpy as np

from horo._native import _core

_CODES = {
    np.dtype(np.uint8): 0,
    np.dtype(np.int8): 1,
    np.dtype(np.int32): 2,
    np.dtype(np.int64): 3,
    np.dtype(np.float16): 4,
    np.dtype(np.float32): 6,
    np.dtype(np.float64): 7,
    np.dtype(np.int16): 8,
    np.dtype(np.bool_): 9,  # moved, never reduced (the core refuses reductions of bool)
}
_BFLOAT16 = 5
_core.recognise_dtypes(_CODES)  # for the common call that skips Python (enqueue.plain_call)


def code_of(dtype, tensor_name):
    code = _CODES.get(dtype)  # an array's dtype: found without converting (every call pays for this)
    if code is not None:
        return code
    dtype = np.dtype(dtype)
    code = _CODES.get(dtype)
    if code is not None:
        return code
    # ml_dtypes' bfloat16 (what TensorFlow and JAX hand to NumPy).
    if dtype.name == "bfloat16" and dtype.itemsize == 2:
        return _BFLOAT16
    supported = "uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, bool"
    raise TypeError(f"'{tensor_name}': dtype {dtype} is not supported (supported: {supported})")
