"""Async handles: what the core returns at enqueue, and what synchronize() hands back."""
from horo._native import _core

# handle -> (output array, arrays the core reads or writes until completion)
_outstanding = {}


def track(handle, output, keepalive):
    _outstanding[handle] = (output, keepalive)
    return handle


def poll(handle):
    """True once the collective behind `handle` has finished (successfully or not)."""
    return _core.poll(handle)


def synchronize(handle):
    """Waits for `handle` and returns its output; raises horo.HoroError if it failed."""
    try:
        _core.wait(handle)
    finally:
        entry = _outstanding.pop(handle, None)
    return entry[0] if entry is not None else None
