"""Async handles: what the core returns at enqueue, and what synchronize() hands back."""
from horo._native import HoroError, _core

# handle -> (tensor name, output array, arrays the core reads or writes until completion)
_outstanding = {}


def track(handle, name, output, keepalive):
    _outstanding[handle] = (name, output, keepalive)
    return handle


def poll(handle):
    """True once the collective behind `handle` has finished (successfully or not)."""
    if handle in _outstanding and not _core.is_initialized():
        return True
    return _core.poll(handle)


def synchronize(handle):
    """Waits for `handle` and returns its output; raises horo.HoroError if it failed."""
    if handle in _outstanding and not _core.is_initialized():
        name = _outstanding.pop(handle)[0]
        raise HoroError(f"'{name}': horo was shut down while this collective was pending")
    try:
        _core.wait(handle)
    finally:
        entry = _outstanding.pop(handle, None)
    return entry[1] if entry is not None else None
