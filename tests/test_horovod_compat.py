"""Horovod-style PyTorch behaviours on real ranks (tests/mpi/ranks_horovod_compat.py) at np=2 and 3,
with the response cache on and off."""
import pytest

LAUNCH_TIMEOUT = 240
CASES = [(2, {}), (3, {"HORO_CACHE_CAPACITY": "0"})]


@pytest.mark.timeout(LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_,env", CASES, ids=["np2", "np3-cache_off"])
def test_horovod_behaviours_on_every_rank(ranks, np_, env):
    pytest.importorskip("torch")
    ranks(np_, "ranks_horovod_compat.py", env=env, timeout=LAUNCH_TIMEOUT)
