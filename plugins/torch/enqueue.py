"""The one path from torch tensors into the core: describe the (checked) tensor,
enqueue it, and remember what synchronize() hands back.

It mirrors horo.enqueue.enqueue, minus the NumPy view: the address comes from
`data_ptr()` and the dtype code from the torch dtype, which keeps the per-call
cost low (a ResNet step enqueues ~160 gradients from autograd hooks).
"""
from horo import process_sets
from horo._native import _core
from horo.enqueue import tensor_name  # noqa: F401 - the plugin names unnamed tensors like the NumPy API
from horo.handles import track
from horo.torch.tensors import CODES

_COLLECTIVES = _core.collective_codes


def enqueue(collective, name, tensor, output, finish, op=1, prescale=1.0, postscale=1.0, root=0, splits=(),
            process_set=None):
    """Hands contiguous CPU `tensor` (and `output`, or None for a core-allocated one) to the core.

    Returns the handle; synchronize(handle) returns finish(core result). Both
    tensors are kept alive until then: the core reads and writes their memory.
    """
    set_id = process_sets.resolve(process_set, name)[0]
    handle = _core.enqueue(
        _COLLECTIVES[collective],
        name,
        tensor.data_ptr(),
        0 if output is None else output.data_ptr(),
        CODES[tensor.dtype],
        tensor.shape,
        op,
        float(prescale),
        float(postscale),
        int(root),
        list(splits),
        set_id,
    )
    return track(handle, name, finish, (tensor, output))
