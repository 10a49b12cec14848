"""The path from torch tensors into the core: horo.enqueue.submit, with the address
from `data_ptr()` and the dtype code from the torch dtype (no NumPy view), which keeps
the per-call cost low (a ResNet step enqueues ~160 gradients from autograd hooks).
"""
from horo.enqueue import submit
from horo.enqueue import tensor_name  # noqa: F401 - the plugin names unnamed tensors like the NumPy API
from horo.torch.tensors import CODES, stream_of


def enqueue(collective, name, tensor, output, finish, op=1, prescale=1.0, postscale=1.0, root=0, splits=(),
            process_set=None):
    """Hands contiguous CPU `tensor` (and `output`, or None for a core-allocated one) to the core.

    Returns the handle; synchronize(handle) returns finish(core result). Both
    tensors are kept alive until then: the core reads and writes their memory.
    """
    if tensor.is_cuda:
        # horo reads after the work torch has queued on the current stream, and synchronize()
        # makes the stream current then wait for horo's results (no host sync on either side).
        return submit(collective, name, tensor.data_ptr(), 0 if output is None else output.data_ptr(),
                      CODES[tensor.dtype], tensor.shape, finish, (tensor, output), op, prescale, postscale, root,
                      splits, process_set, device=tensor.device.index, stream=stream_of(tensor),
                      caller_stream=lambda: stream_of(tensor))
    return submit(collective, name, tensor.data_ptr(), 0 if output is None else output.data_ptr(),
                  CODES[tensor.dtype], tensor.shape, finish, (tensor, output), op, prescale, postscale, root, splits,
                  process_set)
