"""500 async allreduces enqueued in a different order on every rank, then synchronised,
under several settings (response cache off, fusion off + ring, mpi algorithm, HOROVOD_* names)."""
import pytest
from launcher import batched_launcher

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


IDS = [f"np{n}-" + ("-".join(f"{k}={v}" for k, v in e.items()) or "default") for n, e in CASES]
LAUNCH_TIMEOUT = 240


@pytest.fixture(scope="module")
def launch(request):
    """The cases selected at one np run one after another in one MPI job (launcher.run_variants)."""
    cases = {name: ("ranks_async_order.py", env) for name, (_, env) in zip(IDS, CASES)}
    return batched_launcher(request, cases, lambda item: [(item.callspec.params["np_"], item.callspec.id)],
                            LAUNCH_TIMEOUT)


# The first case at an np runs every selected case at that np: at most 3.
@pytest.mark.timeout(3 * LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_,env", CASES, ids=IDS)
def test_500_tensors_in_per_rank_order_complete_correctly(launch, np_, env, request):
    launch(np_, request.node.callspec.id)
