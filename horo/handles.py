"""Async handles: what the core returns at enqueue, and what synchronize() hands back."""
import functools
import threading

from horo._native import _core
from horo.errors import HoroError, HorovodInternalError

# handle -> (tensor name, finish(core_result) -> user result, objects to keep alive until completion,
#            GPU tensors: caller_stream() -> the stream to make wait for the results, else None)
_outstanding = {}


class _Blocking(threading.local):
    depth = 0  # blocking calls this thread is inside


_blocking = _Blocking()


def blocking(collective):
    """Marks a call that synchronizes what it enqueues before it returns (allreduce(), not
    allreduce_async()). Its enqueues tell the core so: this thread runs their cycle itself
    while it waits, and the core does not wake its background thread for them, a wake-up
    that on a host with a rank per core takes the core a rank's caller runs on."""

    @functools.wraps(collective)
    def call(*args, **kwargs):
        _blocking.depth += 1
        try:
            return collective(*args, **kwargs)
        finally:
            _blocking.depth -= 1

    return call


def caller_waits():
    """Whether this thread is inside a @blocking call (its enqueues are synchronized at once)."""
    return _blocking.depth > 0


def track(handle, name, finish, keepalive, caller_stream=None):
    _outstanding[handle] = (name, finish, keepalive, caller_stream)
    return handle


def _checked(handle, what):
    # Before the core sees it: pybind11's own complaint lists C++ signatures, not the argument.
    if isinstance(handle, bool) or not isinstance(handle, int):
        raise TypeError(f"{what}: handle must be the int an *_async call returned, got {type(handle).__name__}")
    return handle


def poll(handle):
    """True once the collective behind `handle` has finished (successfully or not)."""
    _checked(handle, "poll")
    if handle in _outstanding and not _core.is_initialized():
        return True
    return _core.poll(handle)


def synchronize(handle):
    """Waits for `handle` and returns its output; raises horo.HorovodInternalError (a horo.HoroError
    and a RuntimeError) if it failed."""
    if type(handle) is not int:  # the hot path: one type test instead of _checked's two
        _checked(handle, "synchronize")
    entry = _outstanding.get(handle)
    stream = entry[3]() if entry is not None and entry[3] is not None else 0
    try:
        result = _core.wait(handle, stream)
    except HoroError:
        _outstanding.pop(handle, None)
        raise
    except ValueError:  # the core is not running: it says so before looking at the handle
        if entry is not None and not _core.is_initialized():
            _outstanding.pop(handle)
            raise HorovodInternalError(f"'{entry[0]}': horo was shut down while this collective was pending") from None
        raise
    # Anything else (KeyboardInterrupt, a SIGALRM timeout) left the collective
    # running: its buffers stay alive and synchronize(handle) may be called again.
    entry = _outstanding.pop(handle, None)
    return entry[1](result) if entry is not None else None


def synchronize_all(handles):
    """Waits for every handle, even after one fails, so none is left in flight; then raises the first error."""
    results, error = [], None
    for handle in handles:
        try:
            results.append(synchronize(handle))
        except Exception as e:  # noqa: BLE001 - re-raised below
            error = error or e
    if error is not None:
        raise error
    return results
