"""Point-to-point across real MPI ranks (tests/mpi/ranks_point_to_point.py): np=2 on shared
memory, np=3 and 4 on each transport, every launch under a wall-clock timeout so a hang
fails. A rank killed while its peers wait in a receive is tests/test_killed_rank.py's
`point_to_point` scenario."""
import pytest

LAUNCH_TIMEOUT = 150
CASES = [
    (2, "shm", {"HORO_TRANSPORT": "shm"}),
    (3, "default", {}),
    (4, "mpi", {"HORO_TRANSPORT": "mpi"}),
]


@pytest.mark.timeout(LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_,variant,env", CASES, ids=[f"np{n}-{v}" for n, v, _ in CASES])
def test_point_to_point_on_every_rank(ranks, np_, variant, env):
    ranks(np_, "ranks_point_to_point.py", env=env, timeout=LAUNCH_TIMEOUT)
