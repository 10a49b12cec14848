"""torch tensors <-> what the core takes (a CPU address, a dtype code, a shape), and back.

No torch headers are compiled anywhere: the core reads and writes a tensor's memory
through `data_ptr()`, and its own allocations come back as NumPy byte arrays that
torch wraps without a copy.

Rules, checked before anything is enqueued (so a bad tensor fails on the rank that
passed it, with its name, and nothing is left half-submitted):
- dtypes: uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, bool (not reduced);
- CPU or CUDA memory (CUDA tensors go through horo's GPU path: NCCL or MPI
  staging, loaded at run time; where no GPU can serve, a clear error);
- a non-contiguous input is copied to a contiguous one for out-of-place
  collectives; in-place collectives refuse it (a copy would not be in place).
"""
import torch

from horo._native import _core
from horo.cuda_arrays import CudaBuffer, require_gpu

CODES = {
    torch.uint8: 0,
    torch.int8: 1,
    torch.int32: 2,
    torch.int64: 3,
    torch.float16: 4,
    torch.bfloat16: 5,
    torch.float32: 6,
    torch.float64: 7,
    torch.int16: 8,
    torch.bool: 9,  # moved, never reduced (the core refuses reductions of bool)
}
_SUPPORTED = "uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, bool"
_POOL_BYTES = 1 << 20  # outputs this large come from the core's buffer pool (already mapped)


def checked(tensor, name, in_place=False):
    """`tensor` itself, or its contiguous copy for out-of-place use; raises naming `name` if unusable."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"'{name}': expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype not in CODES:
        raise TypeError(f"'{name}': dtype {tensor.dtype} is not supported (supported: {_SUPPORTED})")
    return _placed(tensor, name, in_place)


def as_bytes(tensor, name):
    """A uint8 view of contiguous CPU `tensor` of any dtype: for collectives that only copy bytes."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"'{name}': expected a torch.Tensor, got {type(tensor).__name__}")
    return _placed(tensor, name, in_place=True).detach().reshape(-1).view(torch.uint8)


def _placed(tensor, name, in_place):
    # is_cuda/is_cpu, not device.type: every gradient comes through here, and a device object costs 0.3 us.
    if tensor.is_cuda:
        require_gpu(name)
    elif not tensor.is_cpu:
        raise ValueError(f"'{name}': tensors on device '{tensor.device}' are not supported, only CPU and CUDA tensors")
    if tensor.layout is not torch.strided:
        raise ValueError(f"'{name}': {tensor.layout} tensors are not supported; pass tensor.to_dense()")
    if not tensor.is_contiguous():
        if in_place:
            raise ValueError(
                f"'{name}': an in-place collective needs a contiguous tensor (shape {tuple(tensor.shape)}, "
                f"strides {tensor.stride()}); use the out-of-place variant or tensor.contiguous()"
            )
        tensor = tensor.contiguous()
    return tensor


def empty_like(tensor):
    """An uninitialised contiguous tensor like `tensor`, on its device."""
    if tensor.is_cuda:
        return torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes < _POOL_BYTES:
        return torch.empty(tensor.shape, dtype=tensor.dtype)
    return torch.from_numpy(_core.empty(nbytes)).view(tensor.dtype).view(tensor.shape)


def from_core(data, shape, dtype):
    """A tensor of `dtype` and `shape` over the core-allocated bytes `data` (no copy; keeps them alive).
    GPU results come as (device address, bytes, owner, device): wrapped through __cuda_array_interface__."""
    if isinstance(data, tuple):
        address, nbytes, owner, device = data
        raw = CudaBuffer(address, (nbytes,), "uint8", device, owner=owner)
        return torch.as_tensor(raw, device=f"cuda:{device}").view(dtype).view(shape)
    return torch.from_numpy(data).view(dtype).view(shape)


# The current stream's raw cudaStream_t without building a torch.cuda.Stream object, as torch's own
# generated kernels ask for it: 0.08 us against 2.8 us on an H200 host, and it is asked twice per
# GPU tensor (at enqueue, and at synchronize for the stream that waits on the result).
_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def stream_of(tensor):
    """The cudaStream_t (as an integer) torch is queueing work on for `tensor`'s device now."""
    if _current_raw_stream is not None:
        return _current_raw_stream(tensor.device.index)
    return torch.cuda.current_stream(tensor.device).cuda_stream
