"""Launching the "horo" backend: rank, world size and a store from horo's MPI world.

Under mpirun / horo-run, `init_process_group("horo")` needs no RANK, WORLD_SIZE or
MASTER_ADDR/MASTER_PORT: the env:// rendezvous takes rank and size from horo, and rank 0
hosts a real TCPStore whose address horo broadcasts, so other backends (a gloo group
beside the horo one) share it as they would under torchrun. Variables that are set are
honoured: MASTER_ADDR/MASTER_PORT place the store; RANK/WORLD_SIZE must agree with MPI.
Outside an MPI launch the env:// rendezvous is torch's own, unchanged.
"""
import datetime
import importlib
import os
import socket

import torch.distributed as dist

import horo
from horo.objects import broadcast_object

# The module (torch.distributed.rendezvous, as an attribute, is its function of that name).
rdzv = importlib.import_module("torch.distributed.rendezvous")
# Set in every rank's environment by the MPI launchers horo runs under (Open MPI, MPICH/Hydra, PMIx, MVAPICH).
_MPI_LAUNCH_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE")
_HOW_TO_LAUNCH = ("launch one process per rank with MPI: `horo-run -np N python script.py` or "
                  "`mpirun -np N python script.py`")


def launched_by_mpi():
    return any(v in os.environ for v in _MPI_LAUNCH_VARIABLES)


def ensure_horo():
    if not horo.is_initialized():
        horo.init()


def _agreeing(name, value, mpi_value):
    if value is not None and int(value) != mpi_value:
        raise ValueError(f"horo backend: {name}={value} disagrees with MPI, which started this process as "
                         f"{'rank' if name.lower().endswith('rank') else 'world size'} {mpi_value}; unset {name} "
                         f"or launch so that they agree")


def _advertised_host():
    if horo.local_size() == horo.size():
        return "127.0.0.1"  # every rank on this host
    name = socket.gethostname()
    try:
        return socket.gethostbyname(name)
    except OSError:
        return name


def mpi_store(timeout, query_rank=None, query_size=None):
    """(TCPStore, rank, world size) for this MPI job; rank 0 hosts the store."""
    ensure_horo()
    rank, size = horo.rank(), horo.size()
    _agreeing("RANK", query_rank if query_rank is not None else os.environ.get("RANK"), rank)
    _agreeing("WORLD_SIZE", query_size if query_size is not None else os.environ.get("WORLD_SIZE"), size)
    host = os.environ.get("MASTER_ADDR")
    port = int(os.environ.get("MASTER_PORT", "0"))
    if rank == 0:
        # wait_for_workers=False: the others learn the port only after this returns.
        store = dist.TCPStore(host or "0.0.0.0", port, size, True, timeout, wait_for_workers=False)
        address = (host or _advertised_host(), store.port)
    else:
        address = None
    host, port = broadcast_object(address, root_rank=0, name="horo.c10d.store_address")
    if rank != 0:
        store = dist.TCPStore(host, port, size, False, timeout)
    return store, rank, size


def install_rendezvous():
    """Puts the MPI-aware env:// handler in front of torch's (only MPI launches take the new path)."""
    original = rdzv._rendezvous_handlers["env"]
    if getattr(original, "_horo_wrapped", False):
        return

    def env_rendezvous(url, timeout=datetime.timedelta(minutes=30), **kwargs):
        query = rdzv._query_to_dict(rdzv.urlparse(url).query)
        needs_mpi = not all(os.environ.get(v) for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))
        if not launched_by_mpi() or not needs_mpi:
            if launched_by_mpi():
                ensure_horo()
                _agreeing("RANK", query.get("rank", os.environ.get("RANK")), horo.rank())
                _agreeing("WORLD_SIZE", query.get("world_size", os.environ.get("WORLD_SIZE")), horo.size())
            yield from original(url, timeout=timeout, **kwargs)
            return
        yield mpi_store(timeout, query.get("rank"), query.get("world_size"))
        raise RuntimeError("horo backend: the MPI rendezvous cannot be repeated")

    env_rendezvous._horo_wrapped = True
    rdzv._rendezvous_handlers["env"] = env_rendezvous


def check_world(group_rank, group_size):
    """The default group's rank and size, as torch was told them, against horo's MPI world."""
    ensure_horo()
    if group_size != horo.size():
        where = ("this process is not part of an MPI job" if horo.size() == 1 and not launched_by_mpi()
                 else f"MPI started {horo.size()} processes")
        raise RuntimeError(f"horo backend: torch.distributed was given world size {group_size}, but {where}. "
                           f"The horo backend runs one MPI process per rank: {_HOW_TO_LAUNCH}")
    if group_rank != horo.rank():
        raise RuntimeError(f"horo backend: torch.distributed was given rank {group_rank}, but MPI started this "
                           f"process as rank {horo.rank()}; let horo supply the rank ({_HOW_TO_LAUNCH})")
