"""Bad input raises on every rank and never hangs: mismatched shape/dtype/op/scale
across ranks, a name re-enqueued while in flight, unsupported dtypes, non-contiguous
arrays; the engine keeps working afterwards."""
import pytest


@pytest.mark.timeout(210)
@pytest.mark.parametrize("np_", [1, 2, 3, 4])
def test_errors_raise_on_every_rank_and_the_engine_recovers(ranks, np_):
    ranks(np_, "ranks_errors.py", timeout=180)


@pytest.mark.timeout(210)
def test_errors_raise_with_fusion_off_and_ring_algorithm(ranks):
    ranks(3, "ranks_errors.py", env={"HORO_FUSION_THRESHOLD": "0", "HORO_ALLREDUCE_ALGO": "ring"}, timeout=180)
