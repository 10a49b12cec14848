"""Bad input raises on every rank and never hangs: mismatched shape/dtype/op/scale
across ranks, a name re-enqueued while in flight, unsupported dtypes, non-contiguous
arrays; the engine keeps working afterwards."""
import pytest
from launcher import batched_launcher


CASES = {
    "default": ("ranks_errors.py", {}),
    "fusion_off_ring": ("ranks_errors.py", {"HORO_FUSION_THRESHOLD": "0", "HORO_ALLREDUCE_ALGO": "ring"}),
}


def launches_of(item):
    if item.originalname == "test_errors_raise_with_fusion_off_and_ring_algorithm":
        return [(3, "fusion_off_ring")]
    return [(item.callspec.params["np_"], "default")]


@pytest.fixture(scope="module")
def launch(request):
    """The cases selected at one np run one after another in one MPI job (launcher.run_variants)."""
    return batched_launcher(request, CASES, launches_of, 180)


# At np=3 the first test runs both cases.
@pytest.mark.timeout(2 * 180 + 30)
@pytest.mark.parametrize("np_", [1, 2, 3, 4])
def test_errors_raise_on_every_rank_and_the_engine_recovers(launch, np_):
    launch(np_, "default")


@pytest.mark.timeout(2 * 180 + 30)
def test_errors_raise_with_fusion_off_and_ring_algorithm(launch):
    launch(3, "fusion_off_ring")
