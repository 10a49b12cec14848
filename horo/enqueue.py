"""The one path from the Python API into the core: name the tensor, check the
buffers, describe them, enqueue, and remember what synchronize() returns."""
import collections
import itertools

from horo import dtypes, process_sets
from horo._native import _core
from horo.handles import track
from horo.cuda_arrays import CudaBuffer
from horo.cuda_arrays import from_core as from_device
from horo.tensors import address

_CODES = _core.collective_codes
_unnamed = collections.defaultdict(itertools.count)  # process set id -> counter


def tensor_name(name, collective, process_set=None):
    # Unnamed tensors are numbered in call order, which every member of the
    # process set shares; one counter per set, since only members call it.
    if name is not None:
        return name
    set_id = 0 if process_set is None else process_set.process_set_id
    return f"{collective}.noname.{next(_unnamed[set_id])}" + (f".set{set_id}" if set_id else "")


def enqueue(collective, name, array, output, finish, op=1, prescale=1.0, postscale=1.0, root=0, splits=(),
            process_set=None):
    """Hands `array` (and `output`, or None for a core-allocated one) to the core; returns the handle."""
    with refusing(collective, name, process_set):
        dtype_code = dtypes.code_of(array.dtype, name)
    gpu = isinstance(array, CudaBuffer)
    return submit(collective, name, address(array), 0 if output is None else address(output),
                  dtype_code, array.shape, finish, (array, output), op, prescale, postscale,
                  root, splits, process_set, device=array.device if gpu else -1, stream=array.stream if gpu else 0,
                  caller_stream=array.caller_stream if gpu else None)


class refusing:
    """Argument checks of a named collective: when one fails on this rank, the other
    ranks hear of it (their namesakes fail too) instead of waiting for this rank forever.
    (A class, not @contextmanager: it wraps every call, and a generator costs microseconds.)"""

    __slots__ = ("collective", "name", "process_set")

    def __init__(self, collective, name, process_set=None):
        self.collective, self.name, self.process_set = collective, name, process_set

    def __enter__(self):
        return self

    def __exit__(self, kind, e, _traceback):
        if e is None or not isinstance(e, Exception):
            return False
        set_id = 0 if self.process_set is None else self.process_set.process_set_id
        if set_id is not None and _core.is_initialized():
            _core.reject(_CODES[self.collective], self.name, set_id, str(e))
        return False


def submit(collective, name, input_address, output_address, dtype_code, shape, finish, keepalive, op=1,
           prescale=1.0, postscale=1.0, root=0, splits=(), process_set=None, device=-1, stream=0,
           caller_stream=None):
    """The core's enqueue for a described buffer (the framework plugins describe theirs without
    NumPy); `keepalive` holds the buffers until synchronize(), since the core reads and writes them.
    GPU buffers: `device` (>= 0), the producer's `stream`, and `caller_stream()`, called at
    synchronize() for the stream that must wait for the results."""
    set_id = 0 if process_set is None else process_sets.resolve(process_set, name)[0]
    handle = _core.enqueue(_CODES[collective], name, input_address, output_address, dtype_code, shape, op,
                           float(prescale), float(postscale), int(root), list(splits), set_id, device, stream)
    return track(handle, name, finish, keepalive, caller_stream)


def returning(value):
    if isinstance(value, CudaBuffer):
        return lambda _core_result: value.to_caller()
    return lambda _core_result: value


def allocated(dtype, like=None):
    """finish() for core-allocated outputs: view the bytes as `dtype` in the agreed shape
    (on `like`'s GPU when the input was a GPU array)."""

    def finish(core_result):
        data, shape = core_result[0], core_result[1]
        if isinstance(data, tuple):  # device memory: (address, bytes, owner, device)
            return from_device(data, shape, dtype, like).to_caller()
        return data.view(dtype).reshape(shape)

    return finish
