"""horo.torch where Horovod's own test_torch.py found it apart from Horovod 0.28: each test is one
behaviour that file revealed broken, checked against NumPy / a local torch computation on every rank."""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rank_helpers import expect_raise_on_every_rank, gather_and_compare  # noqa: E402

needs_two_ranks = pytest.mark.skipif(
    __import__("mpi4py.MPI", fromlist=["MPI"]).COMM_WORLD.Get_size() < 2, reason="needs at least two ranks"
)


@pytest.fixture(scope="module")
def hvd():
    import horo.torch as hvd

    hvd.init()
    return hvd


def rows_of(rank):
    return [r % 5 for r in range(rank, rank + 3)]


def test_sparse_allreduce_async_returns_a_callable_handle(hvd):
    rank, size = hvd.rank(), hvd.size()
    dense = [np.zeros((5, 3), np.float32) for _ in range(size)]
    for r in range(size):
        dense[r][rows_of(r)] = r + 1.0
    handle = hvd.sparse_allreduce_async(torch.from_numpy(dense[rank]).to_sparse(), op=hvd.Average, name="th.sparse")
    result = handle()
    assert result.is_sparse
    np.testing.assert_allclose(result.to_dense().numpy(), sum(dense) / size, rtol=1e-6)


def test_broadcast_optimizer_state_leaves_zero_gradients_as_horovods_dummy_step(hvd):
    class ModelNoGrad(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Parameter(torch.tensor([1, 3], dtype=torch.int32), requires_grad=False)
            self.b = torch.nn.Parameter(torch.rand(4))

    model = ModelNoGrad()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9, nesterov=True),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert model.a.grad is None
    assert model.b.grad is not None and torch.equal(model.b.grad, torch.zeros(4))
    assert torch.equal(hvd.broadcast(model.b.grad, root_rank=0, name="th.nograd"), torch.zeros(4))


def test_broadcast_optimizer_state_takes_horovods_model_argument(hvd):
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (1 + hvd.rank()))
    hvd.broadcast_optimizer_state(opt, 0, model)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01)


@needs_two_ranks
def test_bad_alltoall_splits_raise_value_error_on_every_rank(hvd, comm):
    size = hvd.size()
    for what, splits in {"sum above the rows": torch.ones(size, dtype=torch.int32),
                         "too many": torch.ones(size + 1, dtype=torch.int32),
                         "floats": torch.ones(size, dtype=torch.float32)}.items():
        expect_raise_on_every_rank(comm, ValueError, lambda: hvd.alltoall(torch.empty(size - 1), splits),
                                   must_contain=["splits"], what=what)
    np.testing.assert_array_equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, name="th.after.splits").numpy(), [size] * 2)


@needs_two_ranks
def test_alltoall_rows_that_do_not_divide_raise_value_error_on_every_rank(hvd, comm):
    """Without splits, a first dimension that does not divide by the ranks is each caller's own bad
    argument: a ValueError (Horovod's test_horovod_alltoall_equal_split_length_error), not a failure
    found later by the coordinator."""
    size = hvd.size()
    expect_raise_on_every_rank(comm, ValueError, lambda: hvd.alltoall(torch.empty(size + 1), name="th.a2a.indivisible"),
                               must_contain=["th.a2a.indivisible", "does not divide"])
    np.testing.assert_array_equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, name="th.after.indivisible").numpy(),
                                  [size] * 2)


@needs_two_ranks
def test_bad_splits_on_one_rank_fail_every_rank_and_the_ranks_stay_in_step(hvd, comm):
    """A refusal is collective: the rank with the bad argument raises ValueError, the others an error too,
    and the next collectives line up (no rank waits for, or drifts past, another)."""
    rank, size = hvd.rank(), hvd.size()
    splits = [1] * size if rank else [size + 1] + [0] * (size - 1)
    from horo import HoroError

    expect_raise_on_every_rank(comm, (ValueError, HoroError),
                               lambda: hvd.alltoall(torch.ones(size), splits, name="th.a2a.one.bad"),
                               must_contain=["th.a2a.one.bad"])
    for i in range(3):
        np.testing.assert_array_equal(hvd.allreduce(torch.full((2,), float(rank)), op=hvd.Sum, name=f"th.step.{i}")
                                      .numpy(), [sum(range(size))] * 2)


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_embedding_trains_with_sparse_adam(hvd, comm, sparse_as_dense):
    rank, size = hvd.rank(), hvd.size()
    torch.manual_seed(7)
    model = torch.nn.Embedding(10, 3, sparse=True)
    reference = copy.deepcopy(model)
    inputs = [torch.LongTensor([[1, 2, 4, 5], [4, 3, 2, 9]]), torch.LongTensor([[1, 3, 4], [4, 7, 9]])]
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(model.parameters()), lr=0.1),
                                   named_parameters=model.named_parameters(), sparse_as_dense=sparse_as_dense)
    model(inputs[rank % 2]).sum().backward()
    opt.step()
    # The same step by hand: the average of every rank's gradient, as a sparse gradient.
    grads = []
    for r in range(size):
        reference.zero_grad()
        reference(inputs[r % 2]).sum().backward()
        grads.append(reference.weight.grad.to_dense())
    reference.weight.grad = (sum(grads) / size).to_sparse()
    torch.optim.SparseAdam(list(reference.parameters()), lr=0.1).step()
    np.testing.assert_allclose(model.weight.detach().numpy(), reference.weight.detach().numpy(), rtol=1e-6)
    gather_and_compare(comm, model.weight.detach().numpy().tobytes(), "embedding weights")
