"""horo.torch against the behaviours Horovod's own test_torch.py found apart from Horovod 0.28
(tests/mpi/ranks_torch_horovod.py): sparse_allreduce_async's callable handle, broadcast_optimizer_state
before any step, ValueError for bad alltoall splits or indivisible rows on every rank (and ranks kept in step when one
rank alone is wrong), sparse embeddings with SparseAdam; np=2 and 3."""
import pytest

pytest.importorskip("torch")

LAUNCH_TIMEOUT = 180


@pytest.mark.timeout(LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_", [2, 3])
def test_torch_as_horovod_on_every_rank(ranks, np_):
    ranks(np_, "ranks_torch_horovod.py", timeout=LAUNCH_TIMEOUT)
