"""horo.init(comm=...) with an mpi4py communicator: horo's world is that communicator.

Runs inside each MPI rank; one test per mpirun launch (the driver selects it with -k),
because each test initialises and shuts horo down itself.
"""
import numpy as np
import pytest

from mpi4py import MPI

from horo_reference import check_result, make_rank_inputs
from rank_helpers import gather_and_compare

_state = {"used": False}


@pytest.fixture
def horo_module():
    if _state["used"]:
        pytest.skip("horo is shut down in this process already: run one test of this file per launch (-k)")
    _state["used"] = True
    import horo

    yield horo
    if horo.is_initialized():
        horo.shutdown()


def _reduce_within(hvd, sub, key):
    inputs = make_rank_inputs(key, "int64", (33,), "Sum", "wide", sub.Get_size())
    out = hvd.allreduce(inputs[sub.Get_rank()], name=key, op=hvd.Sum)
    check_result(out, inputs, "Sum", True, what=key)
    inputs = make_rank_inputs(key + ".avg", "float32", (8,), "Average", "exact", sub.Get_size())
    out = hvd.allreduce(inputs[sub.Get_rank()], name=key + ".avg")
    exact = sub.Get_size() in (1, 2, 4)
    check_result(out, inputs, "Average", exact, what=key + ".avg")


def test_init_with_comm_world_uses_all_ranks_and_leaves_mpi_usable(horo_module, comm):
    hvd = horo_module
    hvd.init(comm=MPI.COMM_WORLD)
    assert hvd.size() == comm.Get_size() and hvd.rank() == comm.Get_rank()
    _reduce_within(hvd, comm, "world")
    hvd.shutdown()
    assert not MPI.Is_finalized(), "horo.shutdown() finalised an MPI that mpi4py initialised"
    gather_and_compare(comm, comm.allreduce(1), "mpi4py after horo.shutdown()")


def test_init_with_a_split_communicator_reduces_within_each_group(horo_module, comm):
    """Even and odd world ranks form two horo worlds that reduce independently
    (with np=3 the odd group has one rank, with np=1 there is only one group)."""
    hvd = horo_module
    world_rank = comm.Get_rank()
    sub = comm.Split(color=world_rank % 2, key=world_rank)
    hvd.init(comm=sub)
    assert hvd.size() == sub.Get_size(), (hvd.size(), sub.Get_size())
    assert hvd.rank() == sub.Get_rank(), (hvd.rank(), sub.Get_rank())
    # the two groups use the same names at the same time: they must not interfere
    _reduce_within(hvd, sub, f"group{world_rank % 2}")
    _reduce_within(hvd, sub, "shared.name")
    hvd.shutdown()
    gather_and_compare(comm, comm.allreduce(1), "mpi4py after horo.shutdown()")
    sub.Free()
