"""GPU arrays in the NumPy-level API: CuPy arrays and any object with
`__cuda_array_interface__` (Numba, CUDA torch tensors, ...).

A CudaBuffer describes one to the core (device address, CUDA device, the
stream that produced it) and wraps what comes back; results are handed back
as the caller's kind (a CuPy array for CuPy input, else the CudaBuffer, which
itself exposes `__cuda_array_interface__` so any CUDA library can wrap it
without a copy).
"""
import numpy as np

from horo._native import HoroError, _core
from horo import gpu


def is_cuda_array(obj):
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    dlpack_device = getattr(obj, "__dlpack_device__", None)
    if callable(dlpack_device):
        try:
            return dlpack_device()[0] in (2, 3, 13)  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
        except Exception:  # noqa: BLE001 - not a DLPack producer after all
            return False
    return False


_gpu_seen = []  # once a device has been seen, the per-tensor check is free (devices do not vanish)


def require_gpu(name):
    """Raises naming `name` when no CUDA device can serve a GPU tensor here."""
    if _gpu_seen:
        return
    info = gpu.gpu_info()
    if info.device_count <= 0:
        raise HoroError(f"'{name}': a CUDA tensor reached horo, but horo cannot use a GPU here: {info.cuda_reason}")
    _gpu_seen.append(True)


class CudaBuffer:
    """C-contiguous CUDA memory: address, shape, dtype, device; `owner` keeps it alive."""

    def __init__(self, address, shape, dtype, device, stream=0, owner=None, kind=None):
        self.address, self.shape, self.dtype = address, tuple(shape), np.dtype(dtype)
        self.device, self.stream, self.owner, self.kind = device, stream, owner, kind

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        shape = tuple(int(d) for d in shape)
        if -1 in shape:
            known = int(np.prod([d for d in shape if d != -1], dtype=np.int64)) or 1
            shape = tuple(self.size // known if d == -1 else d for d in shape)
        if int(np.prod(shape, dtype=np.int64)) != self.size:
            raise ValueError(f"cannot reshape {self.shape} into {shape}")
        return CudaBuffer(self.address, shape, self.dtype, self.device, self.stream, self, self.kind)

    def view(self, dtype):
        dtype = np.dtype(dtype)
        if self.nbytes % dtype.itemsize:
            raise ValueError(f"{self.nbytes} bytes do not divide into {dtype}")
        return CudaBuffer(self.address, (self.nbytes // dtype.itemsize,), dtype, self.device, self.stream, self,
                          self.kind)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.address, False), "version": 3,
                "strides": None, "stream": None}

    def caller_stream(self):
        """The stream the caller is on now: horo's results are made ready for it."""
        if self.kind == "cupy":
            import cupy

            return cupy.cuda.get_current_stream().ptr
        return self.stream

    def to_caller(self):
        """This buffer as the kind of array the caller passed in."""
        if self.kind == "cupy":
            import cupy

            with cupy.cuda.Device(self.device):
                return cupy.asarray(self)
        return self


def as_cuda_buffer(obj, name, in_place=False):
    """A CudaBuffer over `obj`'s memory (no copy), or a clear error naming `name`."""
    require_gpu(name)
    iface = getattr(obj, "__cuda_array_interface__", None)
    if iface is None:
        raise TypeError(
            f"'{name}': a CUDA DLPack tensor without __cuda_array_interface__ ({type(obj).__name__}); "
            "wrap it with cupy.from_dlpack(tensor) first"
        )
    shape, dtype = tuple(iface["shape"]), np.dtype(iface["typestr"])
    strides = iface.get("strides")
    if strides is not None and tuple(strides) != _c_strides(shape, dtype.itemsize):
        raise ValueError(f"'{name}': tensor is not contiguous (shape {shape}, strides {tuple(strides)}); "
                         "pass a contiguous copy")
    address, read_only = iface["data"]
    if in_place and read_only:
        raise ValueError(f"'{name}': an in-place collective needs a writable tensor, this one is read-only")
    kind = "cupy" if type(obj).__module__.startswith("cupy") else None
    owner_device = getattr(obj, "device", None)
    device = getattr(owner_device, "id", None)  # CuPy
    if device is None:
        device = getattr(owner_device, "index", None)  # torch
    if device is None:
        device = _core.cuda_current_device()
    stream = iface.get("stream") or 0  # CAI v3: None means no stream to wait on; 0 is the legacy default
    return CudaBuffer(address, shape, dtype, device, stream, obj, kind)


def _c_strides(shape, itemsize):
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(strides))


def empty(shape, dtype, like):
    """Uninitialised device memory of `shape` and `dtype` on `like`'s device."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    # Stream-ordered on the caller's stream: the enqueue's ready event, recorded there after it, orders horo's use.
    address, owner = _core.device_empty(like.device, nbytes, like.stream or 0)
    return CudaBuffer(address, shape, dtype, like.device, like.stream, owner, like.kind)


def from_core(result_memory, shape, dtype, like):
    """The core's device allocation (address, bytes, owner, device) as `dtype` in `shape`."""
    address, _nbytes, owner, _device = result_memory
    return CudaBuffer(address, shape, dtype, like.device, like.stream, owner, like.kind)
