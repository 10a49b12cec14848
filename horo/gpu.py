"""What horo's GPU path can use on this machine, found at run time.

The core opens NCCL and the CUDA runtime with dlopen the first time a GPU
tensor arrives (or one of these functions asks), so one build of horo serves
machines with and without CUDA. The search order, per library:
its override variable (`HORO_NCCL_LIB`, `HORO_CUDART_LIB`), a copy already
loaded in the process (CUDA torch and CuPy bring their own), the `nvidia-*`
pip wheels found here through importlib, then the system loader path.

    horo.gpu_available()   # True when a CUDA device is visible
    horo.nccl_version()    # "2.30.7", or None (horo.gpu_info().nccl_reason says why)
    horo.nccl_built()      # 23007 (Horovod's NCCL_VERSION_CODE) where NCCL and CUDA load, else 0
"""
import collections
import functools
import importlib.util
import os

from horo._native import _core

GpuInfo = collections.namedtuple(
    "GpuInfo",
    "device_count cuda_reason cudart_path nccl_version nccl_reason nccl_path nccl_search_order cudart_search_order",
)

# Where the nvidia-* wheels put their libraries, under the `nvidia` namespace package.
_NCCL_IN_WHEELS = ("nccl/lib/libnccl.so.2",)
_CUDART_IN_WHEELS = ("cu13/lib/libcudart.so.13", "cuda_runtime/lib/libcudart.so.12")


def wheel_library_paths():
    """(NCCL paths, CUDA runtime paths) of the nvidia-* wheels installed here, without importing them."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    roots = list(spec.submodule_search_locations) if spec and spec.submodule_search_locations else []

    def existing(relative_paths):
        return [os.path.join(root, rel) for root in roots for rel in relative_paths
                if os.path.exists(os.path.join(root, rel))]

    return existing(_NCCL_IN_WHEELS), existing(_CUDART_IN_WHEELS)


@functools.lru_cache(maxsize=None)
def _tell_core_where_wheels_are():
    nccl, cudart = wheel_library_paths()
    _core.set_gpu_library_candidates(nccl, cudart)


def prepare():
    """Hands the core the wheel paths; must run before the core's first GPU library load."""
    _tell_core_where_wheels_are()


def gpu_info():
    """A GpuInfo: visible CUDA devices and NCCL, each with the reason where unavailable."""
    prepare()
    return GpuInfo(**_core.gpu_status())


def gpu_available():
    """True when the CUDA runtime loads and reports at least one device."""
    return gpu_info().device_count > 0


def nccl_version():
    """NCCL's version ("2.30.7") when it loads here, else None (`gpu_info().nccl_reason` says why)."""
    return gpu_info().nccl_version


def cuda_runtime_loads():
    """Whether the CUDA runtime library loads here (a device is another question: gpu_available())."""
    return bool(gpu_info().cudart_path)


def nccl_version_code():
    """NCCL's version as NCCL_VERSION_CODE (major * 10000 + minor * 100 + patch) where both NCCL and the
    CUDA runtime load (horo's NCCL path needs both), else 0."""
    info = gpu_info()
    if info.nccl_version is None or not info.cudart_path:
        return 0
    major, minor, patch = (int(p) for p in info.nccl_version.split("."))
    return major * 10000 + minor * 100 + patch
