"""The one path from the Python API into the core: name the tensor, check the
buffers, describe them, enqueue, and remember what synchronize() returns."""
import itertools

from horo import dtypes, process_sets
from horo._native import _core
from horo.handles import track
from horo.tensors import address

_CODES = _core.collective_codes
_unnamed = itertools.count()


def tensor_name(name, collective):
    # Unnamed tensors are numbered in call order, which every rank shares.
    return name if name is not None else f"{collective}.noname.{next(_unnamed)}"


def enqueue(collective, name, array, output, finish, op=1, prescale=1.0, postscale=1.0, root=0, splits=(),
            process_set=None):
    """Hands `array` (and `output`, or None for a core-allocated one) to the core; returns the handle."""
    set_id = process_sets.resolve(process_set, name)[0]
    handle = _core.enqueue(
        _CODES[collective],
        name,
        address(array),
        0 if output is None else address(output),
        dtypes.code_of(array.dtype, name),
        array.shape,
        op,
        float(prescale),
        float(postscale),
        int(root),
        list(splits),
        set_id,
    )
    return track(handle, name, finish, (array, output))


def returning(value):
    return lambda _core_result: value


def allocated(dtype):
    """finish() for core-allocated outputs: view the bytes as `dtype` in the agreed shape."""

    def finish(core_result):
        data, shape = core_result[0], core_result[1]
        return data.view(dtype).reshape(shape)

    return finish
