"""horo.init(comm=...) takes an mpi4py communicator: COMM_WORLD, or a split of it
(two independent horo worlds in one job); MPI stays usable after horo.shutdown()."""
import pytest


@pytest.mark.timeout(120)
@pytest.mark.parametrize("np_", [1, 2])
def test_init_with_comm_world(ranks, np_):
    ranks(np_, "ranks_init_comm.py", select="test_init_with_comm_world", timeout=90)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("np_", [3, 4])
def test_init_with_a_split_communicator_reduces_within_each_group(ranks, np_):
    ranks(np_, "ranks_init_comm.py", select="test_init_with_a_split_communicator", timeout=90)
