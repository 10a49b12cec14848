"""Adasum (op=horo.Adasum) on real MPI ranks against the NumPy reference of Horovod's pairwise
combination (tests/mpi/ranks_adasum.py): np=2 and 4 compute it, np=3 must refuse it on every rank."""
import pytest

LAUNCH_TIMEOUT = 240


@pytest.mark.timeout(LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_", [2, 3, 4])
def test_adasum_on_every_rank(ranks, np_):
    ranks(np_, "ranks_adasum.py", timeout=LAUNCH_TIMEOUT)
