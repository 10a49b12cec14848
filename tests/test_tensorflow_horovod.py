"""horo.tensorflow against the behaviours Horovod's own test_tensorflow.py found apart from Horovod 0.28
(tests/mpi/ranks_tensorflow_horovod.py): in-place broadcast in TF1 graphs, unsigned types moved but not
reduced, alltoall's arguments and results, IndexedSlices refusals, averaged allgather/broadcast
gradients (graph and eager, grouped too), Adasum in DistributedGradientTape; np=2 and 3."""
import pytest

pytest.importorskip("tensorflow")

LAUNCH_TIMEOUT = 300


@pytest.mark.timeout(LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_", [2, 3])
def test_tensorflow_as_horovod_on_every_rank(ranks, np_):
    ranks(np_, "ranks_tensorflow_horovod.py", env={"TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=LAUNCH_TIMEOUT)
