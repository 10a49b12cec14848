"""Behaviours Horovod programs rely on, written as Horovod's own PyTorch unit tests check them,
with only the import changed (`import horo.torch as hvd`): int16/bool tensors, Horovod's exception
types, integer pre/post-scaling, argument errors on every rank, join with int and float
allreduces, sparse allreduce and sparse gradients, DistributedOptimizer's attributes.

Runs inside each MPI rank (tests/test_horovod_compat.py launches it at np=2 and 3).
"""
import copy

import numpy as np
import pytest
import torch

import horo.torch as hvd
from rank_helpers import outcome_of


def raised(fn):
    """The exception fn() raised (None if it returned)."""
    return outcome_of(fn)[2]


@pytest.fixture(scope="module", autouse=True)
def started(hvd):  # noqa: ARG001 - the session fixture initialises horo
    yield


@pytest.mark.parametrize("dtype", [torch.int16, torch.bool])
def test_int16_and_bool_move_through_allgather_broadcast_and_alltoall(dtype, rank, size):
    base = torch.arange(2 * size, dtype=torch.int64) + 10 * rank
    tensor = (base % 2 == 0) if dtype == torch.bool else base.to(dtype)
    gathered = hvd.allgather(tensor, name=f"ag.{dtype}")
    expected = torch.cat([((torch.arange(2 * size) + 10 * r) % 2 == 0) if dtype == torch.bool
                          else (torch.arange(2 * size) + 10 * r).to(dtype) for r in range(size)])
    assert gathered.dtype == dtype and torch.equal(gathered, expected)
    root = hvd.broadcast(tensor, root_rank=size - 1, name=f"bc.{dtype}")
    assert torch.equal(root, expected[(size - 1) * 2 * size:])
    received = hvd.alltoall(tensor, name=f"a2a.{dtype}")
    assert torch.equal(received, torch.cat([expected[r * 2 * size + 2 * rank:r * 2 * size + 2 * rank + 2]
                                            for r in range(size)]))


def test_int16_allreduce_wraps_like_torch(size):
    tensor = torch.tensor([32000, -32000, 7], dtype=torch.int16)
    summed = hvd.allreduce(tensor, op=hvd.Sum, name="int16.sum")
    expected = tensor.to(torch.int64) * size
    assert torch.equal(summed, expected.to(torch.int16))  # two's-complement wrap, not saturation


def test_bool_allreduce_is_refused_with_a_value_error():
    with pytest.raises(ValueError, match="bool tensors cannot be reduced"):
        hvd.allreduce(torch.tensor([True, False]), name="bool.sum", op=hvd.Sum)


def test_duplicate_name_in_flight_raises_value_error_that_is_a_horo_error(rank):
    # Rank 0 alone submits before the barrier, so its call is still in flight when it reuses the name
    # (a name is free again once its collective completed).
    tensor = torch.ones(3)
    handle, error = None, None
    if rank == 0:
        handle = hvd.allreduce_async(tensor, name="duplicate_name")
        with pytest.raises(ValueError) as info:
            hvd.allreduce_async(tensor, name="duplicate_name")
        error = info.value
    hvd.barrier()
    if rank != 0:
        handle = hvd.allreduce_async(tensor, name="duplicate_name")
    torch.testing.assert_close(hvd.synchronize(handle), tensor)  # the average of ones
    if rank == 0:
        assert isinstance(error, hvd.HoroError) and "duplicate_name" in str(error), error


def test_mismatch_found_at_synchronize_raises_horovod_internal_error(rank):
    tensor = torch.ones(3 + rank)  # shapes differ across ranks
    error = raised(lambda: hvd.allreduce(tensor, name="shape.mismatch"))
    assert isinstance(error, hvd.HorovodInternalError) and isinstance(error, RuntimeError), error
    assert isinstance(error, hvd.HoroError)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.float16, torch.float32])
def test_prescale_and_postscale_follow_horovods_rule(dtype, rank, size):
    # Horovod's test: integers scale in float64 and are cast back (truncated), float16 in float32.
    factor = 0.7
    values = torch.tensor([-100, -37, -3, 0, 5, 41, 99], dtype=torch.float32) + rank
    tensor = values.to(dtype)
    summed = hvd.allreduce(tensor, op=hvd.Sum, prescale_factor=factor, name=f"prescale.{dtype}")
    compute = torch.float32 if dtype == torch.float16 else (torch.float64 if not dtype.is_floating_point else dtype)
    inputs = [(values - rank + r).to(dtype) for r in range(size)]
    expected = sum((t.to(compute) * factor).to(dtype).to(torch.float64) for t in inputs)
    tol = 0 if not dtype.is_floating_point else (size * 0.1 if dtype == torch.float16 else 1e-4)
    assert torch.allclose(summed.to(torch.float64), expected, atol=tol), (summed, expected)

    post = hvd.allreduce(tensor, op=hvd.Sum, postscale_factor=factor, name=f"postscale.{dtype}")
    total = sum(t.to(torch.float64) for t in inputs).to(dtype)
    expected = (total.to(compute) * factor).to(dtype)
    assert torch.allclose(post.to(torch.float64), expected.to(torch.float64), atol=tol), (post, expected)


def test_alltoall_without_splits_needs_a_divisible_first_dimension_on_every_rank(size):
    error = raised(lambda: hvd.alltoall(torch.zeros(size + 1), name="a2a.indivisible"))
    assert isinstance(error, RuntimeError) and "does not divide" in str(error), error


def test_alltoall_splits_of_the_wrong_length_raise_on_every_rank(size):
    error = raised(lambda: hvd.alltoall(torch.zeros(size + 1), splits=torch.tensor([size + 1]), name="a2a.len"))
    assert isinstance(error, RuntimeError) and "splits" in str(error), error


def test_alltoall_splits_of_a_float_dtype_raise_value_error(size):
    with pytest.raises(ValueError, match="splits must be"):
        hvd.alltoall(torch.zeros(size), splits=torch.ones(size, dtype=torch.float32), name="a2a.float")


def test_reducescatter_of_a_0d_tensor_raises_on_every_rank():
    error = raised(lambda: hvd.reducescatter(torch.tensor(3.0), name="rs.0d"))
    assert isinstance(error, RuntimeError) and "0-d" in str(error), error


@pytest.mark.parametrize("caching", [False, True])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32, torch.float64])
@pytest.mark.parametrize("first_join_rank", [0, 1])
def test_join_with_int_and_float_allreduce_averages_as_horovod(dtype, first_join_rank, caching, rank, size):
    # Horovod's test_horovod_join_allreduce: the joined rank stands in with zeros, Average divides
    # by the full size (integers: truncated), and join returns the same last rank everywhere.
    gen = torch.Generator().manual_seed(1234)
    tensor_a = torch.randint(-100, 100, (5, 5), generator=gen).to(dtype)
    tensor_b = torch.randint(-100, 100, (17,), generator=gen).to(dtype)
    names = (f"join.a.{dtype}", f"join.b.{dtype}") if caching else (f"join.a.{dtype}.{first_join_rank}.nc",
                                                                     f"join.b.{dtype}.{first_join_rank}.nc")
    if caching:  # a first round puts the names in the response cache
        hvd.synchronize(hvd.allreduce_async(tensor_a, name=names[0]))
        hvd.synchronize(hvd.allreduce_async(tensor_b, name=names[1]))
    if rank == first_join_rank:
        last = hvd.join()
    else:
        averaged_a = hvd.synchronize(hvd.allreduce_async(tensor_a, name=names[0]))
        averaged_b = hvd.synchronize(hvd.allreduce_async(tensor_b, name=names[1]))
        last = hvd.join()
        for tensor, averaged in ((tensor_a, averaged_a), (tensor_b, averaged_b)):
            total = tensor.to(torch.float64) * (size - 1)
            if dtype == torch.float32:  # sum / size correctly rounded, as Horovod's test asks (np=3 too)
                assert torch.equal(averaged, tensor * (size - 1) / size), (averaged, total)
            elif dtype.is_floating_point:  # times 1/size: within float64's rounding
                assert torch.allclose(averaged.to(torch.float64), total / size, rtol=1e-15, atol=0), (averaged, total)
            else:  # exact: float64, truncated toward zero
                assert torch.equal(averaged.to(torch.float64), torch.trunc(total / size)), (averaged, total)
    assert last != first_join_rank
    assert hvd.allgather_object(last, name=f"join.last.{dtype}.{first_join_rank}.{caching}") == [last] * size


def test_sparse_allreduce_async_sums_rows_of_every_rank(rank, size):
    dense = torch.zeros(6, 3)
    dense[rank] = rank + 1.0
    dense[5] = 1.0  # a row every rank holds: summed
    for op, divisor in ((hvd.Sum, 1), (hvd.Average, size)):
        handle = hvd.sparse_allreduce_async(dense.to_sparse(), name=f"sparse.{op}", op=op)
        result = hvd.synchronize(handle)
        assert result.is_sparse
        expected = torch.zeros(6, 3)
        for r in range(size):  # run with at most 5 ranks: row r is rank r's alone
            expected[r] = r + 1.0
        expected[5] = float(size)
        assert torch.allclose(result.to_dense(), expected / divisor), (result.to_dense(), expected / divisor)


def test_sparse_embedding_gradients_train_identically_on_every_rank(comm, rank, size):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4, sparse=True), torch.nn.Flatten(), torch.nn.Linear(8, 1))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    start = [p.detach().clone() for p in model.parameters()]
    batch = torch.tensor([[rank, 9 - rank], [3, 3]])
    # This rank's own gradients, from a copy without horo's hooks: the in-place allreduce that
    # DistributedOptimizer starts from each hook may already have replaced p.grad before step().
    reference = copy.deepcopy(model)
    reference(batch).sum().backward()
    local_grads = [p.grad.to_dense().clone() if p.grad.is_sparse else p.grad.clone() for p in reference.parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters())
    model(batch).sum().backward()
    opt.step()
    # The reference: plain SGD with every rank's gradient averaged (gathered with mpi4py).
    for p0, p, g in zip(start, model.parameters(), local_grads):
        mean = sum(comm.allgather(g.numpy())) / size
        assert np.allclose(p.detach().numpy(), p0.numpy() - 0.5 * mean, atol=1e-6)
    weights = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
    assert all(np.array_equal(weights, w) for w in comm.allgather(weights))


def test_distributed_optimizer_without_named_parameters_has_horovods_attributes():
    model = torch.nn.Linear(3, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    assert opt._parameter_names == {model.weight: "allreduce.noname.0", model.bias: "allreduce.noname.1"}
    assert opt.backward_passes_per_step == 1
    assert set(opt._allreduce_delay) == {model.weight, model.bias}
    assert opt.op == hvd.Average and opt.gradient_predivide_factor == 1.0 and opt.sparse_as_dense is False
    named = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())
    assert named._parameter_names == {model.weight: "weight", model.bias: "bias"}
