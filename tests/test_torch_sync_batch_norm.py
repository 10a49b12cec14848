"""horo.torch.SyncBatchNorm across real MPI ranks (one process, np = 2 and 4): forward
output, input gradient, weight/bias gradients and running statistics equal
torch.nn.BatchNorm{1,2,3}d's on the concatenated batch (float64), equal and unequal
per-rank batch sizes, an empty shard, momentum=None, eval mode, convert_sync_batchnorm,
and process sets (np=4).

Each launch runs `mpirun -np N ... pytest tests/mpi/ranks_torch_sync_batch_norm.py`
under a wall-clock timeout: a hang fails the test.
"""
import pytest

pytest.importorskip("torch")

LAUNCH_TIMEOUT = 60


@pytest.mark.timeout(LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("np_", [None, 2, 4], ids=["single_process", "np2", "np4"])
def test_sync_batch_norm_matches_batchnorm_on_the_whole_batch(ranks, np_):
    ranks(np_, "ranks_torch_sync_batch_norm.py", timeout=LAUNCH_TIMEOUT)
