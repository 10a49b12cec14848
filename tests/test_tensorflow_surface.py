"""Horovod 0.28's TensorFlow/Keras names that horo used to refuse (tests/mpi/ranks_tensorflow_surface.py):
SyncBatchNormalization, PartialDistributedGradientTape, LocalGradientAggregationHelper, Keras
PartialDistributedOptimizer and BestModelCheckpoint, broadcast_global_variables, BroadcastGlobalVariablesHook,
the broadcast callback's local_variables; np=2 and 3."""
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("keras")

LAUNCH_TIMEOUT = 300


@pytest.mark.timeout(LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_", [2, 3])
def test_tensorflow_surface_on_every_rank(ranks, np_):
    ranks(np_, "ranks_tensorflow_surface.py", env={"TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=LAUNCH_TIMEOUT)
