"""What Horovod's framework modules report about their build, answered for horo's
(re-exported by horo.torch and horo.tensorflow), so scripts that branch on it
(e.g. `if hvd.nccl_built(): ...`) take the path this machine can serve.

horo's GPU path is always compiled in, and NCCL and the CUDA runtime are opened
at run time (horo/gpu.py), so for horo "built with NCCL/CUDA" can only mean
"compiled in and loadable here": the GPU answers below ask the loader, once per
process, and never need a GPU (a machine with the nvidia-* wheels answers yes)."""
from horo import gpu as _gpu


def mpi_built():
    return True


def mpi_enabled():
    return True


def gloo_built():
    return False


def gloo_enabled():
    return False


def nccl_built():
    """NCCL's version code (Horovod's NCCL_VERSION_CODE, e.g. 23007 for 2.30.7; truthy) when
    horo's NCCL path can run here: NCCL and the CUDA runtime both load. Else 0; the reason is in
    `horo.gpu_info().nccl_reason` / `.cuda_reason`, and `horo.nccl_version()` is then None.
    Loading needs no GPU: `horo.gpu_available()` says whether a device is visible."""
    return _gpu.nccl_version_code()


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    """True when the CUDA runtime loads here (horo's GPU path is always compiled in); the reason
    it does not is in `horo.gpu_info().cuda_reason`. Says nothing about devices: see gpu_available()."""
    return _gpu.cuda_runtime_loads()


def rocm_built():
    return False


def sycl_built():
    """False: horo has no SYCL (Intel GPU) path. Horovod 0.28's Intel build (intel-optimization-for-horovod)
    and its test files ask it."""
    return False
