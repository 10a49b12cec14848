"""The path from the Python API into the core: name the tensor, check the
buffers, describe them, enqueue, and remember what synchronize() returns. The one
shortcut, plain_call(), is the core recognising a call this path would pass as it is."""
import collections
import functools
import itertools
import operator

from horo import dtypes, ops, process_sets
from horo._native import _core
from horo.handles import caller_waits, synchronize, track
from horo.cuda_arrays import CudaBuffer
from horo.cuda_arrays import from_core as from_device
from horo.tensors import address, as_array

_CODES = _core.collective_codes
_unnamed = collections.defaultdict(itertools.count)  # process set id -> counter


def tensor_name(name, collective, process_set=None, waits=False):
    # Unnamed tensors are numbered in call order, which every member of the
    # process set shares; one counter per set, since only members call it.
    # `waits`: a blocking single-tensor call, done before its caller can start another: an
    # unnamed one takes its collective's one name, so a loop of them hits the response cache
    # rather than negotiating a new name each time (MEASUREMENTS.md, "Small blocking calls").
    if name is not None:
        if not isinstance(name, str):
            raise TypeError(f"{collective}: name must be a str, got {type(name).__name__} ({name!r})")
        return name
    set_id = 0 if process_set is None else getattr(process_set, "process_set_id", None)
    number = "" if waits else f".{next(_unnamed[set_id])}"
    return f"{collective}.noname{number}" + (f".set{set_id}" if set_id else "")


def plain_call(collective, in_place=False, default_op=ops.Sum):
    """plain(tensor, name, process_set[, root, op, prescale, postscale]): the core's run of the
    common blocking call of `collective`, a plain NumPy array in the global set (bindings.cc
    run_plain), without this module's naming, checks and finish (1.3 us of a 4 KiB call). It
    returns the result, or NotImplemented for any other call, which then takes the full path (whose
    checks name any problem). `default_op`: the op of a call that names none, the one the full path
    passes (ops.resolve's default, or enqueue's), since ranks on either path meet in one collective."""
    return functools.partial(_core.run_plain, _CODES[collective], tensor_name(None, collective, None, True), in_place,
                             default_op)


def enqueue(collective, name, array, output, finish, op=1, prescale=1.0, postscale=1.0, root=0, splits=(),
            process_set=None, waits=False):
    """Hands `array` (and `output`, or None for a core-allocated one) to the core; returns the handle.
    `waits`: the caller wants the result now (a blocking call): runs the collective to completion
    and returns finish(result) instead; for a host array that is one call into the core, not three."""
    try:  # not `with refusing(...)`: the hot path, and a try costs nothing until it raises
        dtype_code = dtypes.code_of(array.dtype, name)
    except Exception as e:
        refusing(collective, name, process_set).announce(e)
        raise
    if isinstance(array, CudaBuffer):
        handle = submit(collective, name, array.address, 0 if output is None else address(output), dtype_code,
                        array.shape, finish, (array, output), op, prescale, postscale, root, splits, process_set,
                        array.device, array.stream, array.caller_stream, waits)
        return synchronize(handle) if waits else handle
    if not waits:
        # A host array: its address directly (tensors.address would test for a CUDA buffer again).
        return submit(collective, name, _core.data_address(array), 0 if output is None else _core.data_address(output),
                      dtype_code, array.shape, finish, (array, output), op, prescale, postscale, root, splits,
                      process_set)
    if process_set is not None or type(root) is not int or type(prescale) is not float or type(postscale) is not float:
        set_id, root, prescale, postscale = _arguments(collective, name, root, prescale, postscale, process_set)
    else:  # the common case, checked without a call
        set_id = 0
    return finish(_core.run(_CODES[collective], name, array, output, dtype_code, op, prescale, postscale, root,
                            list(splits), set_id))


def checked_array(tensor, collective, name, process_set=None, in_place=False, check=as_array):
    """check(tensor, name, in_place), as_array's or a framework plugin's, refused on every rank should
    it fail here. A try, not `with refusing(...)`: this is every call's path, and a try costs
    nothing until it raises (the `with`, 0.27-0.5 us)."""
    try:
        return check(tensor, name, in_place)
    except Exception as e:
        refusing(collective, name, process_set).announce(e)
        raise


class refusing:
    """Argument checks of a named collective: when one fails on this rank, the other
    ranks hear of it (their namesakes fail too) instead of waiting for this rank forever.
    `name` may be a list: a group refused as a whole (none of it was enqueued here).
    (A class, not @contextmanager: it wraps every call, and a generator costs microseconds.)"""

    __slots__ = ("collective", "name", "process_set")

    def __init__(self, collective, name, process_set=None):
        self.collective, self.name, self.process_set = collective, name, process_set

    def __enter__(self):
        return self

    def __exit__(self, kind, e, _traceback):
        if e is not None and isinstance(e, Exception):
            self.announce(e)
        return False

    def announce(self, e):
        """Tells the other ranks this rank refused the tensor(s), because of `e`."""
        set_id = 0 if self.process_set is None else getattr(self.process_set, "process_set_id", None)
        if isinstance(set_id, int) and _core.is_initialized():
            for one in [self.name] if isinstance(self.name, str) else self.name:
                _core.reject(_CODES[self.collective], one, set_id, str(e))


def checked_root(root_rank, name):
    """root_rank as an int; a float, str or None is refused here, since int() would quietly
    turn 1.9 or "0" into a root (a range check needs the set, so the coordinator makes it)."""
    try:
        return operator.index(root_rank)
    except TypeError:
        raise TypeError(f"'{name}': root_rank must be an int, got {type(root_rank).__name__} ({root_rank!r})") from None


def checked_scale(factor, which, name):
    # float() would take "2" (a str) quietly; a number of any kind (a 0-d tensor too) is fine.
    if not isinstance(factor, (str, bytes)) and factor is not None:
        try:
            return float(factor)
        except (TypeError, ValueError):
            pass
    raise TypeError(f"'{name}': {which} must be a real number, got {type(factor).__name__} ({factor!r})")


def _arguments(collective, name, root, prescale, postscale, process_set):
    """(process set id, root, prescale, postscale), checked; a refusal reaches the other ranks."""
    set_id = process_sets.set_id(process_set, name)
    if type(root) is not int or type(prescale) is not float or type(postscale) is not float:
        with refusing(collective, name, process_set):  # the common case (defaults) skips the checks
            root = checked_root(root, name)
            prescale = checked_scale(prescale, "prescale_factor", name)
            postscale = checked_scale(postscale, "postscale_factor", name)
    return set_id, root, prescale, postscale


def submit(collective, name, input_address, output_address, dtype_code, shape, finish, keepalive, op=1,
           prescale=1.0, postscale=1.0, root=0, splits=(), process_set=None, device=-1, stream=0,
           caller_stream=None, waits=False):
    """The core's enqueue for a described buffer (the framework plugins describe theirs without
    NumPy); `keepalive` holds the buffers until synchronize(), since the core reads and writes them.
    GPU buffers: `device` (>= 0), the producer's `stream`, and `caller_stream()`, called at
    synchronize() for the stream that must wait for the results. `waits`: the caller synchronizes
    the handle at once (the core then runs its cycle on the caller's thread)."""
    set_id, root, prescale, postscale = _arguments(collective, name, root, prescale, postscale, process_set)
    handle = _core.enqueue(_CODES[collective], name, input_address, output_address, dtype_code, shape, op,
                           prescale, postscale, root, list(splits), set_id, device, stream, waits or caller_waits())
    return track(handle, name, finish, keepalive, caller_stream)


def enqueue_group(submits):
    """Calls each of `submits` (which enqueue one tensor of a grouped call) in order. When one
    raises, those already enqueued are awaited before the error goes up, so none is left in
    flight with its name taken (nobody would synchronize it)."""
    from horo.handles import synchronize_all

    handles = []
    for submit_one in submits:
        try:
            handles.append(submit_one())
        except Exception:
            try:
                synchronize_all(handles)
            except Exception:  # noqa: BLE001 - the first error is the one to report
                pass
            raise
    return handles


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
        if data.dtype is dtype and data.shape == shape:  # _core.run made it so
            return data
        return data.view(dtype).reshape(shape)

    return finish
