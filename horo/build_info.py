"""What Horovod's framework modules report about their build, answered for horo's
(re-exported by horo.torch and horo.tensorflow), so scripts that branch on it
(e.g. `if hvd.nccl_built(): ...`) take the CPU/MPI path."""


def mpi_built():
    return True


def mpi_enabled():
    return True


def gloo_built():
    return False


def gloo_enabled():
    return False


def nccl_built():
    return 0  # Horovod returns the NCCL version, 0 when not built


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False
