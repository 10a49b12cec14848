"""500 async allreduces enqueued in a different order on every rank, then synchronised,
under several settings (response cache off, fusion off + ring, mpi algorithm, HOROVOD_* names)."""
import pytest

CASES = [
    (1, {}),
    (2, {}),
    (3, {}),
    (4, {}),
    (3, {"HORO_CACHE_CAPACITY": "0"}),
    (4, {"HORO_FUSION_THRESHOLD": "0", "HORO_ALLREDUCE_ALGO": "ring"}),
    (2, {"HORO_ALLREDUCE_ALGO": "mpi", "HORO_CYCLE_TIME": "5"}),
    (3, {"HOROVOD_FUSION_THRESHOLD": "4096", "HOROVOD_CACHE_CAPACITY": "16", "HOROVOD_CYCLE_TIME": "2"}),
]


@pytest.mark.timeout(270)
@pytest.mark.parametrize(
    "np_,env", CASES, ids=[f"np{n}-" + ("-".join(f"{k}={v}" for k, v in e.items()) or "default") for n, e in CASES]
)
def test_500_tensors_in_per_rank_order_complete_correctly(ranks, np_, env):
    ranks(np_, "ranks_async_order.py", env=env, timeout=240)
