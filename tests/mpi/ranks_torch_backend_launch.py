"""Launching the "horo" backend under mpirun, inside each MPI rank: RANK / WORLD_SIZE that
disagree with MPI raise a clear error on every rank; MASTER_ADDR / MASTER_PORT, where set,
place the TCPStore that rank 0 hosts; with none of them set horo supplies everything.

Each test initialises and destroys its own default group. Runs at np = 2.
"""
import os
import socket

import pytest
import torch
import torch.distributed as dist

import horo.torch  # noqa: F401 - registers the backend

from rank_helpers import expect_raise_on_every_rank

_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(autouse=True)
def clean_environment():
    saved = {v: os.environ.pop(v) for v in _VARIABLES if v in os.environ}
    yield
    for v in _VARIABLES:
        os.environ.pop(v, None)
    os.environ.update(saved)
    if dist.is_initialized():
        dist.destroy_process_group()


def check_world_works(comm):
    t = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(t)
    assert t.item() == float(sum(range(comm.Get_size())))
    assert dist.get_rank() == comm.Get_rank() and dist.get_world_size() == comm.Get_size()


def test_nothing_set_horo_supplies_everything(comm):
    dist.init_process_group("horo")
    check_world_works(comm)


def test_world_size_disagreeing_with_mpi_raises_on_every_rank(comm):
    os.environ["WORLD_SIZE"] = str(comm.Get_size() + 1)
    expect_raise_on_every_rank(comm, ValueError, lambda: dist.init_process_group("horo"),
                               must_contain=["WORLD_SIZE", "disagrees with MPI"], what="WORLD_SIZE off by one")


def test_rank_disagreeing_with_mpi_raises_on_every_rank(comm):
    os.environ["RANK"] = str((comm.Get_rank() + 1) % comm.Get_size())
    expect_raise_on_every_rank(comm, ValueError, lambda: dist.init_process_group("horo"),
                               must_contain=["RANK", "disagrees with MPI"], what="RANK rotated")


def test_rank_argument_disagreeing_with_mpi_raises_on_every_rank(comm):
    wrong = (comm.Get_rank() + 1) % comm.Get_size()
    expect_raise_on_every_rank(comm, ValueError,
                               lambda: dist.init_process_group("horo", rank=wrong, world_size=comm.Get_size()),
                               must_contain=["RANK", "disagrees with MPI"], what="rank= rotated")


def test_master_addr_and_port_place_the_store(comm):
    if comm.Get_rank() == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    else:
        port = None
    port = comm.bcast(port, root=0)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("horo")
    check_world_works(comm)
    store = dist.distributed_c10d._get_default_store()
    while hasattr(store, "underlying_store"):
        store = store.underlying_store
    assert store.port == port
