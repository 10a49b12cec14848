"""horo.torch.SyncBatchNorm inside each MPI rank: on the concatenation of every rank's
shard, it must behave exactly like torch.nn.BatchNorm{1,2,3}d on the whole batch in
one process (float64, tight tolerance): the forward output, the input gradient, the
weight and bias gradients (summed over ranks: each rank keeps its local share, the
optimizer averages them like any other gradient), the running statistics after a few
steps (momentum 0.1 and None), and evaluation mode afterwards. Ranks may hold
different batch sizes, one sample, or none at all.

Every rank builds the same global batch from a seed and takes its own rows, so the
reference needs no communication.
"""
import numpy as np
import pytest
import torch
from mpi4py import MPI

TOL = dict(rtol=1e-10, atol=1e-10)


@pytest.fixture(scope="module")
def hvd():
    import horo.torch as hvd

    hvd.init()
    yield hvd


def shard_sizes(kind, size):
    if kind == "equal":
        return [3] * size
    if kind == "unequal":  # rank k holds k + 1 samples (one rank normalises a single sample with the others')
        return [k + 1 for k in range(size)] if size > 1 else [2]
    if kind == "one_empty":  # the last rank has nothing this step (a world of one keeps its sample)
        return [2 + k for k in range(size - 1)] + [0] if size > 1 else [2]
    raise ValueError(kind)


def my_rows(counts, rank):
    start = sum(counts[:rank])
    return slice(start, start + counts[rank])


def sum_over_ranks(comm, t):
    return torch.from_numpy(comm.allreduce(t.detach().numpy().copy(), op=MPI.SUM))


REF = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d, 5: torch.nn.BatchNorm3d}
SPATIAL = {2: (), 3: (5,), 4: (3, 2), 5: (2, 2, 3)}


def make_pair(hvd, ndim, channels, momentum=0.1, affine=True, seed=0):
    """A SyncBatchNorm and the reference BatchNorm with the same (non-trivial) parameters."""
    ref = REF[ndim](channels, momentum=momentum, affine=affine).double()
    sync = hvd.SyncBatchNorm(channels, momentum=momentum, affine=affine).double()
    if affine:
        g = torch.Generator().manual_seed(seed + 100)
        with torch.no_grad():
            ref.weight.copy_(torch.rand(channels, generator=g, dtype=torch.float64) + 0.5)
            ref.bias.copy_(torch.randn(channels, generator=g, dtype=torch.float64))
            sync.weight.copy_(ref.weight)
            sync.bias.copy_(ref.bias)
    return sync, ref


def global_batch(counts, ndim, channels, step, seed=0):
    g = torch.Generator().manual_seed(seed * 1000 + step)
    shape = (sum(counts), channels) + SPATIAL[ndim]
    # an offset mean: the statistics must not lose precision to E[x^2] - E[x]^2
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 3 + 7
    dy = torch.randn(shape, generator=g, dtype=torch.float64)
    return x, dy


def train_steps(hvd, comm, counts, ndim, channels=4, steps=3, momentum=0.1, affine=True):
    rank = comm.Get_rank()
    rows = my_rows(counts, rank)
    sync, ref = make_pair(hvd, ndim, channels, momentum, affine)
    for step in range(steps):
        x, dy = global_batch(counts, ndim, channels, step)
        xr = x.clone().requires_grad_(True)
        yr = ref(xr)
        (yr * dy).sum().backward()

        xs = x[rows].clone().requires_grad_(True)
        ys = sync(xs)
        (ys * dy[rows]).sum().backward()

        torch.testing.assert_close(ys, yr[rows].detach(), **TOL, msg=lambda m: f"forward, step {step}: {m}")
        torch.testing.assert_close(xs.grad, xr.grad[rows], **TOL, msg=lambda m: f"input grad, step {step}: {m}")
        if affine:
            torch.testing.assert_close(sum_over_ranks(comm, sync.weight.grad), ref.weight.grad, **TOL,
                                       msg=lambda m: f"weight grad (summed over ranks), step {step}: {m}")
            torch.testing.assert_close(sum_over_ranks(comm, sync.bias.grad), ref.bias.grad, **TOL,
                                       msg=lambda m: f"bias grad (summed over ranks), step {step}: {m}")
            for m in (sync, ref):
                m.weight.grad = None
                m.bias.grad = None
        torch.testing.assert_close(sync.running_mean, ref.running_mean, **TOL)
        torch.testing.assert_close(sync.running_var, ref.running_var, **TOL)
        assert int(sync.num_batches_tracked) == int(ref.num_batches_tracked) == step + 1
    return sync, ref, rows


@pytest.mark.parametrize("ndim", [2, 3, 4, 5], ids=["1d_NC", "1d_NCL", "2d", "3d"])
@pytest.mark.parametrize("kind", ["equal", "unequal"])
def test_training_matches_batchnorm_on_concatenated_batch(hvd, comm, ndim, kind):
    train_steps(hvd, comm, shard_sizes(kind, comm.Get_size()), ndim)


def test_a_rank_with_an_empty_shard_still_takes_part(hvd, comm):
    train_steps(hvd, comm, shard_sizes("one_empty", comm.Get_size()), 4, steps=2)


def test_cumulative_average_when_momentum_is_none(hvd, comm):
    train_steps(hvd, comm, shard_sizes("unequal", comm.Get_size()), 4, momentum=None, steps=4)


def test_without_affine_parameters(hvd, comm):
    sync, _, _ = train_steps(hvd, comm, shard_sizes("unequal", comm.Get_size()), 3, affine=False, steps=2)
    assert sync.weight is None and sync.bias is None


def test_eval_mode_uses_running_statistics(hvd, comm):
    counts = shard_sizes("unequal", comm.Get_size())
    sync, ref, rows = train_steps(hvd, comm, counts, 4, steps=2)
    sync.eval()
    ref.eval()
    x, _ = global_batch(counts, 4, 4, step=99)
    with torch.no_grad():
        torch.testing.assert_close(sync(x[rows]), ref(x)[rows], **TOL)


def test_float32_input_with_large_offset(hvd, comm):
    """Per-rank (mean, M2) combined in the stats dtype: no catastrophic cancellation at mean/std = 1e3."""
    counts = shard_sizes("unequal", comm.Get_size())
    rows = my_rows(counts, comm.Get_rank())
    g = torch.Generator().manual_seed(7)
    x = torch.randn(sum(counts), 3, 4, 4, generator=g, dtype=torch.float64) + 1000.0
    ref = torch.nn.BatchNorm2d(3).double()
    sync = hvd.SyncBatchNorm(3)
    y = sync(x[rows].float())
    torch.testing.assert_close(y.double(), ref(x)[rows].detach(), rtol=0, atol=2e-3)


def test_convert_sync_batchnorm_swaps_every_batchnorm_and_keeps_its_state(hvd, comm):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(2, 4, 3), torch.nn.BatchNorm2d(4),
        torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 6), torch.nn.BatchNorm1d(6, momentum=None)),
    )
    with torch.no_grad():
        model[1].running_mean.fill_(0.25)
        model[1].weight.fill_(1.5)
    weight = model[1].weight
    converted = hvd.SyncBatchNorm.convert_sync_batchnorm(model)
    assert isinstance(converted[1], hvd.SyncBatchNorm) and isinstance(converted[2][2], hvd.SyncBatchNorm)
    assert converted[1].weight is weight
    assert float(converted[1].running_mean[0]) == 0.25
    assert converted[2][2].momentum is None
    assert not any(type(m) in (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d) for m in converted.modules())
    # still a working model: one training step across the ranks
    converted(torch.randn(3 + comm.Get_rank(), 2, 4, 4)).sum().backward()
    assert converted[0].weight.grad is not None


@pytest.mark.skipif(MPI.COMM_WORLD.Get_size() < 4, reason="needs four ranks")
def test_statistics_stay_inside_the_process_set(hvd, comm):
    """Ranks {0, 1} and {2, 3} each normalise over their own pair only."""
    rank = comm.Get_rank()
    low, high = hvd.add_process_set([0, 1]), hvd.add_process_set([2, 3])
    try:
        mine = low if rank < 2 else high
        counts = [2, 3]  # within the pair
        rows = my_rows(counts, rank % 2)
        x, dy = global_batch(counts, 4, 3, step=rank // 2, seed=5)
        ref = torch.nn.BatchNorm2d(3).double()
        sync = hvd.SyncBatchNorm(3, process_set=mine).double()
        xr = x.clone().requires_grad_(True)
        (ref(xr) * dy).sum().backward()
        xs = x[rows].clone().requires_grad_(True)
        ys = sync(xs)
        (ys * dy[rows]).sum().backward()
        torch.testing.assert_close(ys, ref(x)[rows].detach(), **TOL)
        torch.testing.assert_close(xs.grad, xr.grad[rows], **TOL)
    finally:
        hvd.remove_process_set(low)
        hvd.remove_process_set(high)
