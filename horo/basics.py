"""The process model: init/shutdown and where this process sits."""
import atexit
import os

from horo._native import _core
from horo.errors import HoroError


def init(comm=None, process_sets=None):
    """Starts horo on MPI_COMM_WORLD, or on `comm` (an mpi4py communicator).

    MPI that mpi4py (or anyone) already initialised is joined, not restarted.
    Without mpirun this is a world of size 1. Collective: every rank calls it.
    `process_sets` (horo.ProcessSet objects) are added right away, as by add_process_set.
    """
    if comm is None:
        _refuse_slurm_singleton(before_mpi=True)
        _core.init()
    else:
        if not hasattr(comm, "py2f"):
            raise TypeError(f"horo.init(comm=...) takes an mpi4py communicator, not {type(comm).__name__}")
        _core.init(comm.py2f())
    if comm is None:
        _refuse_slurm_singleton()
    _unlink_singleton_segment()
    if _core.rank() == 0:  # once per job, not once per rank
        from horo.environment import warn_about_unknown_names

        warn_about_unknown_names(_core.tunables())
    if process_sets:
        from horo.process_sets import add_process_set

        for process_set in process_sets:
            add_process_set(process_set)


def _refuse_slurm_singleton(before_mpi=False):
    """N copies of a script started by plain `srun` each find a world of one and would train apart:
    stop here, naming the launch that works, rather than run N unrelated jobs. Before MPI starts where
    the environment already says so (an MPI may abort in MPI_Init there, with a message of its own)."""
    from horo.run.slurm import singleton_error

    message = singleton_error(None if before_mpi else _core.size())
    if message:
        if not before_mpi:
            _core.shutdown()
        raise HoroError(message)


def _unlink_singleton_segment():
    """Open MPI 5 started without a launcher (a world of one) never removes the file behind its
    shared-memory BTL's segment, 16 MiB in /dev/shm per run (open-mpi/ompi#13261). No peer will ever
    attach to it, so its name goes now; the mapping stays."""
    if _core.size() != 1 or any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK")):
        return  # launched: the launcher removes it
    from horo.run.slurm import SEGMENT_PREFIXES

    try:
        with open("/proc/self/maps") as maps:
            fields = [line.split(None, 5) for line in maps]
    except OSError:
        return
    for path in {f[5].strip() for f in fields if len(f) == 6}:
        if path.startswith(tuple("/dev/shm/" + prefix for prefix in SEGMENT_PREFIXES)):
            try:
                os.unlink(path)
            except OSError:
                pass


def shutdown():
    """Stops the background thread. Pending collectives fail on every rank."""
    from horo.process_sets import forget_all

    _core.shutdown()
    forget_all()


def is_initialized():
    return _core.is_initialized()


def size():
    return _core.size()


def rank():
    return _core.rank()


def local_size():
    return _core.local_size()


def local_rank():
    """This rank's index among the ranks on its host, for GPU binding. MPI's, or Slurm's SLURM_LOCALID
    where MPI found no neighbours on the host but Slurm placed several of this step's tasks there."""
    from horo.run.slurm import slurm_local_rank

    return slurm_local_rank(_core.local_rank(), _core.local_size(), _core.size())


def cross_size():
    return _core.cross_size()


def cross_rank():
    return _core.cross_rank()


def is_homogeneous():
    """True when every host runs the same number of ranks (Horovod's name).

    Ranks with the same local rank form one cross communicator, so hosts of equal size give
    local_size * cross_size == size on every rank, and hosts of different sizes do not.
    """
    return local_size() * cross_size() == size()


def mpi_threads_supported():
    return _core.mpi_threads_supported()


def tunables():
    """Every environment knob: name, Horovod alias, default and meaning."""
    return _core.tunables()


# Leave the other ranks an error rather than a hang if this process exits
# with collectives in flight, then finalise MPI if horo started it.
atexit.register(_core.finalize)
