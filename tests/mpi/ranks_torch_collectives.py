"""horo.torch collectives on real torch tensors, inside each MPI rank: every entry point
(sync, in place, async + synchronize, grouped) against the NumPy reference over every
dtype; process sets; gradients through every differentiable collective against an
analytic reference; bad input raising a clear error naming the tensor on every rank.

Runs inside each MPI rank (see conftest.py in this folder for how to launch it).
"""
import numpy as np
import pytest
import torch

import horo

from horo_reference import (
    BFLOAT16,
    DTYPES,
    OPS,
    check_result,
    kinds_for,
    make_rank_inputs,
    must_be_exact,
    reference,
    seed_of,
)
from rank_helpers import expect_raise_on_every_rank

TORCH_DTYPES = {
    "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64,
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
}


@pytest.fixture(scope="module")
def thvd():
    import horo.torch as hvd

    hvd.init()
    yield hvd


def to_torch(a):
    a = np.ascontiguousarray(a)
    if a.dtype == BFLOAT16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def to_numpy(t):
    assert isinstance(t, torch.Tensor), f"expected a torch.Tensor, got {type(t).__name__}"
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BFLOAT16)
    return t.numpy()


def rank_arrays(key, dtype, shapes, kind="exact", op="Sum"):
    """Every rank's input (rank r's shape is shapes[r]), from seeds: each rank knows them all."""
    rng_kind = kinds_for(dtype)[0 if kind == "exact" else 1]
    return [make_rank_inputs((key, r), dtype, shapes[r], op, rng_kind, len(shapes))[r] for r in range(len(shapes))]


# --- allreduce ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce_every_op_every_entry_point(thvd, dtype):
    size, rank = thvd.size(), thvd.rank()
    for i, op in enumerate(OPS):
        kind = kinds_for(dtype)[i % 2]
        inputs = make_rank_inputs(("allreduce", dtype, op), dtype, (4, 5), op, kind, size)
        x = to_torch(inputs[rank])
        before = x.clone()
        way = ["sync", "in place", "async", "async in place"][i % 4]
        name = f"t.allreduce.{dtype}.{op}"
        hop = getattr(thvd, op)
        if way == "sync":
            out = thvd.allreduce(x, op=hop, name=name)
        elif way == "in place":
            out = thvd.allreduce_(x, op=hop, name=name)
            assert out is x
        elif way == "async":
            h = thvd.allreduce_async(x, op=hop, name=name)
            assert thvd.poll(h) in (True, False)
            out = thvd.synchronize(h)
        else:
            out = thvd.synchronize(thvd.allreduce_async_(x, op=hop, name=name))
            assert out is x
        if way in ("sync", "async"):
            assert torch.equal(x, before), f"{name}: out-of-place allreduce changed its input"
        assert out.dtype == TORCH_DTYPES[dtype] and out.shape == (4, 5)
        check_result(to_numpy(out), inputs, op, must_be_exact(dtype, op, kind, size), what=f"{name} ({way})")


@pytest.mark.parametrize("dtype", ["float32", "int32", "bfloat16"])
def test_allreduce_prescale_postscale_and_scalar(thvd, dtype):
    size, rank = thvd.size(), thvd.rank()
    inputs = make_rank_inputs(("scaled", dtype), dtype, (7,), "Sum", "scale", size)
    out = thvd.allreduce(to_torch(inputs[rank]), op=thvd.Sum, prescale_factor=0.5, postscale_factor=2.0,
                         name=f"t.scaled.{dtype}")
    check_result(to_numpy(out), inputs, "Sum", must_be_exact(dtype, "Sum", "scale", size, 0.5, 2.0), 0.5, 2.0,
                 what="scaled allreduce")
    scalar = thvd.allreduce(torch.tensor(float(rank + 1), dtype=torch.float64), name="t.scalar")
    assert scalar.shape == () and scalar.item() == (size + 1) / 2
    # the deprecated average= flag still maps to Sum/Average
    summed = thvd.allreduce(torch.ones(3, dtype=torch.int64), average=False, name="t.average_false")
    assert summed.tolist() == [size] * 3


def test_grouped_allreduce_one_handle_and_in_place(thvd):
    size, rank = thvd.size(), thvd.rank()
    dtypes = ["float32", "int64", "float16", "bfloat16"]
    inputs = {d: make_rank_inputs(("grouped", d), d, (3, 2 + i), "Sum", "exact" if d != "int64" else "wide", size)
              for i, d in enumerate(dtypes)}
    tensors = [to_torch(inputs[d][rank]) for d in dtypes]
    handle = thvd.grouped_allreduce_async(tensors, op=thvd.Sum, name="t.grouped")
    outs = thvd.synchronize(handle)
    assert isinstance(outs, list) and len(outs) == len(dtypes)
    for d, out in zip(dtypes, outs):
        check_result(to_numpy(out), inputs[d], "Sum", True, what=f"grouped {d}")
    sync_outs = thvd.grouped_allreduce(tensors, op=thvd.Sum, name="t.grouped.sync")
    for d, out in zip(dtypes, sync_outs):
        check_result(to_numpy(out), inputs[d], "Sum", True, what=f"grouped sync {d}")
    in_place = [t.clone() for t in tensors]
    returned = thvd.grouped_allreduce_(in_place, op=thvd.Sum, name="t.grouped.inplace")
    assert all(a is b for a, b in zip(returned, in_place))
    for d, out in zip(dtypes, in_place):
        check_result(to_numpy(out), inputs[d], "Sum", True, what=f"grouped in place {d}")
    assert thvd.synchronize(thvd.grouped_allreduce_async([], name="t.grouped.empty")) == []


# --- allgather, broadcast, alltoall, reducescatter --------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_allgather_ragged_first_dimension(thvd, dtype):
    size, rank = thvd.size(), thvd.rank()
    arrays = rank_arrays("allgather", dtype, [(r + 1, 3) for r in range(size)])
    expected = np.concatenate(arrays)
    out = thvd.allgather(to_torch(arrays[rank]), name=f"t.allgather.{dtype}")
    assert to_numpy(out).tobytes() == expected.tobytes() and tuple(out.shape) == expected.shape
    out = thvd.synchronize(thvd.allgather_async(to_torch(arrays[rank]), name=f"t.allgather.async.{dtype}"))
    assert to_numpy(out).tobytes() == expected.tobytes()


def test_grouped_allgather_and_scalars(thvd):
    size, rank = thvd.size(), thvd.rank()
    a = rank_arrays("ga.a", "float32", [(r, 2) for r in range(size)])  # rank 0 contributes no rows
    b = rank_arrays("ga.b", "int8", [(2,)] * size)
    outs = thvd.grouped_allgather([to_torch(a[rank]), to_torch(b[rank])], name="t.grouped_allgather")
    assert to_numpy(outs[0]).tobytes() == np.concatenate(a).tobytes()
    assert to_numpy(outs[1]).tobytes() == np.concatenate(b).tobytes()
    outs = thvd.synchronize(thvd.grouped_allgather_async([to_torch(b[rank])], name="t.grouped_allgather.async"))
    assert to_numpy(outs[0]).tobytes() == np.concatenate(b).tobytes()
    scalars = thvd.allgather(torch.tensor(rank, dtype=torch.int32), name="t.allgather.scalar")
    assert scalars.tolist() == list(range(size))


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_every_root_every_entry_point(thvd, dtype):
    size, rank = thvd.size(), thvd.rank()
    for root in range(size):
        arrays = rank_arrays(("broadcast", root), dtype, [(3, 4)] * size)
        for way in ("sync", "in place", "async", "async in place"):
            x = to_torch(arrays[rank])
            name = f"t.broadcast.{dtype}.{root}.{way}"
            if way == "sync":
                out = thvd.broadcast(x, root, name=name)
            elif way == "in place":
                out = thvd.broadcast_(x, root, name=name)
            elif way == "async":
                out = thvd.synchronize(thvd.broadcast_async(x, root, name=name))
            else:
                out = thvd.synchronize(thvd.broadcast_async_(x, root, name=name))
            assert (out is x) == ("in place" in way)
            assert to_numpy(out).tobytes() == arrays[root].tobytes(), name
            if "in place" not in way:
                assert to_numpy(x).tobytes() == arrays[rank].tobytes(), f"{name}: input changed"


@pytest.mark.parametrize("dtype", ["float32", "int64", "bfloat16", "uint8"])
def test_alltoall_with_and_without_splits(thvd, dtype):
    size, rank = thvd.size(), thvd.rank()
    # rank r sends (r + j) % 3 rows to rank j
    splits = [[(r + j) % 3 for j in range(size)] for r in range(size)]
    arrays = rank_arrays("alltoall", dtype, [(sum(splits[r]), 2) for r in range(size)])
    pieces = [np.split(arrays[r], np.cumsum(splits[r])[:-1]) for r in range(size)]
    expected = np.concatenate([pieces[r][rank] for r in range(size)])
    out, received = thvd.alltoall(to_torch(arrays[rank]), splits=torch.tensor(splits[rank], dtype=torch.int32),
                                  name=f"t.alltoall.{dtype}")
    assert to_numpy(out).tobytes() == expected.tobytes() and out.shape == expected.shape
    assert received.tolist() == [splits[r][rank] for r in range(size)]
    # without splits: the first dimension split as evenly as possible, only the output returned
    even = rank_arrays("alltoall.even", dtype, [(2 * size, 3)] * size)
    out = thvd.alltoall(to_torch(even[rank]), name=f"t.alltoall.even.{dtype}")
    assert isinstance(out, torch.Tensor)
    assert to_numpy(out).tobytes() == np.concatenate([e[2 * rank: 2 * rank + 2] for e in even]).tobytes()
    out, received = thvd.synchronize(thvd.alltoall_async(to_torch(arrays[rank]), splits=splits[rank],
                                                         name=f"t.alltoall.async.{dtype}"))
    assert to_numpy(out).tobytes() == expected.tobytes()


@pytest.mark.parametrize("dtype", ["float32", "int32", "float16", "float64"])
def test_reducescatter_uneven_rows_sum_and_average(thvd, dtype):
    size, rank = thvd.size(), thvd.rank()
    rows = 2 * size + 1  # the first rows % size ranks get one row more
    counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
    start = sum(counts[:rank])
    for op in ("Sum", "Average"):
        inputs = make_rank_inputs(("rs", dtype, op), dtype, (rows, 3), op, kinds_for(dtype)[0], size)
        expected = reference(inputs, op)[start: start + counts[rank]]
        out = thvd.reducescatter(to_torch(inputs[rank]), op=getattr(thvd, op), name=f"t.rs.{dtype}.{op}")
        exact = must_be_exact(dtype, op, kinds_for(dtype)[0], size)
        if exact:
            assert to_numpy(out).tobytes() == expected.tobytes(), f"reducescatter {dtype} {op}"
        else:
            np.testing.assert_allclose(to_numpy(out).astype(np.float64), expected.astype(np.float64), rtol=1e-2)
    # default op is Average (Horovod's), async and grouped forms
    x = torch.full((size, 2), float(rank), dtype=torch.float64)
    out = thvd.synchronize(thvd.reducescatter_async(x, name="t.rs.default"))
    assert torch.equal(out, torch.full((1, 2), (size - 1) / 2, dtype=torch.float64))
    outs = thvd.grouped_reducescatter([x, 2 * x], op=thvd.Sum, name="t.rs.grouped")
    total = size * (size - 1) / 2
    assert torch.equal(outs[0], torch.full((1, 2), total, dtype=torch.float64))
    assert torch.equal(outs[1], torch.full((1, 2), 2 * total, dtype=torch.float64))


def test_non_contiguous_inputs(thvd, comm):
    size = thvd.size()
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    transposed = base.t()  # not contiguous
    out = thvd.allreduce(transposed, op=thvd.Sum, name="t.noncontig")
    assert torch.equal(out, transposed * size) and out.is_contiguous()
    gathered = thvd.allgather(transposed, name="t.noncontig.allgather")
    assert torch.equal(gathered, torch.cat([transposed] * size))
    expect_raise_on_every_rank(comm, ValueError, lambda: thvd.allreduce_(transposed, name="t.noncontig.inplace"),
                               must_contain=["t.noncontig.inplace", "contiguous"], what="in-place on a transposed view")


def test_process_set_collectives(thvd, comm):
    size, rank = thvd.size(), thvd.rank()
    if size < 2:
        pytest.skip("needs at least two ranks")
    evens = thvd.add_process_set([r for r in range(size) if r % 2 == 0])
    try:
        if rank % 2 == 0:
            members = evens.ranks
            out = thvd.allreduce(torch.tensor([float(rank)]), op=thvd.Sum, name="t.ps.allreduce", process_set=evens)
            assert out.item() == float(sum(members))
            gathered = thvd.allgather(torch.tensor([rank]), name="t.ps.allgather", process_set=evens)
            assert gathered.tolist() == members
            b = thvd.broadcast(torch.tensor([rank]), members[-1], name="t.ps.broadcast", process_set=evens)
            assert b.item() == members[-1]
            w = torch.ones(2, dtype=torch.float64, requires_grad=True)
            thvd.allgather(w.unsqueeze(0), name="t.ps.allgather.grad", process_set=evens).sum().backward()
            assert torch.equal(w.grad, torch.ones(2, dtype=torch.float64))
        else:
            expect = pytest.raises(ValueError, match="not in")
            with expect:
                thvd.allreduce(torch.ones(1), name="t.ps.outsider", process_set=evens)
    finally:
        comm.Barrier()
        thvd.remove_process_set(evens)


# --- gradients -------------------------------------------------------------------------------


def upstream(tag, shape, size):
    """Each rank's upstream gradient for a case (every rank can compute every rank's)."""
    return [torch.from_numpy(np.random.default_rng([seed_of(tag), r]).integers(-4, 5, size=shape) / 4.0)
            for r in range(size)]


def leaf(tag, shape, rank):
    x = torch.from_numpy(np.random.default_rng([seed_of(tag), 1000 + rank]).uniform(-1, 1, size=shape))
    return x.requires_grad_(True)


def test_allreduce_gradient(thvd):
    size, rank = thvd.size(), thvd.rank()
    for op, pre, post in (("Sum", 1.0, 1.0), ("Average", 1.0, 1.0), ("Sum", 0.5, 3.0), ("Average", 2.0, 0.25)):
        x = leaf("ar", (3, 2), rank)
        c = upstream(("ar", op, pre), (3, 2), size)
        y = thvd.allreduce(x, op=getattr(thvd, op), prescale_factor=pre, postscale_factor=post)
        assert y.requires_grad
        y.backward(c[rank])
        expected = pre * post * sum(c) / (size if op == "Average" else 1)
        torch.testing.assert_close(x.grad, expected, rtol=1e-12, atol=1e-12)
    # grouped: the same rule per tensor
    xs = [leaf("gar0", (2,), rank), leaf("gar1", (3, 1), rank)]
    cs = [upstream("gar0", (2,), size), upstream("gar1", (3, 1), size)]
    ys = thvd.grouped_allreduce(xs, op=thvd.Sum)
    torch.autograd.backward(ys, [c[rank] for c in cs])
    for x, c in zip(xs, cs):
        torch.testing.assert_close(x.grad, sum(c), rtol=1e-12, atol=1e-12)
    # Min has no gradient: backward says so
    y = thvd.allreduce(leaf("armin", (2,), rank), op=thvd.Min)
    with pytest.raises(NotImplementedError, match="Min"):
        y.sum().backward()


def test_allgather_gradient_ragged(thvd):
    size, rank = thvd.size(), thvd.rank()
    rows = [r + 1 for r in range(size)]
    x = leaf("ag", (rows[rank], 2), rank)
    c = upstream("ag", (sum(rows), 2), size)
    thvd.allgather(x).backward(c[rank])
    start = sum(rows[:rank])
    # Horovod's convention: the gradient is averaged over ranks, then this rank's rows are kept
    torch.testing.assert_close(x.grad, (sum(c) / size)[start: start + rows[rank]], rtol=1e-12, atol=1e-12)
    xs = [leaf("gag0", (1, 3), rank), leaf("gag1", (2,), rank)]
    cs = [upstream("gag0", (size, 3), size), upstream("gag1", (2 * size,), size)]
    ys = thvd.grouped_allgather(xs)
    torch.autograd.backward(ys, [c[rank] for c in cs])
    torch.testing.assert_close(xs[0].grad, (sum(cs[0]) / size)[rank: rank + 1])
    torch.testing.assert_close(xs[1].grad, (sum(cs[1]) / size)[2 * rank: 2 * rank + 2])


def test_broadcast_gradient(thvd):
    size, rank = thvd.size(), thvd.rank()
    for root in range(size):
        x = leaf(("bc", root), (2, 3), rank)
        c = upstream(("bc", root), (2, 3), size)
        y = thvd.broadcast(x, root)
        torch.testing.assert_close(y.detach(), leaf(("bc", root), (2, 3), root).detach())
        y.backward(c[rank])
        expected = sum(c) / size if rank == root else torch.zeros(2, 3, dtype=torch.float64)
        torch.testing.assert_close(x.grad, expected, rtol=1e-12, atol=1e-12)


def test_alltoall_gradient(thvd):
    size, rank = thvd.size(), thvd.rank()
    splits = [[(r + j) % 3 for j in range(size)] for r in range(size)]
    x = leaf("a2a", (sum(splits[rank]), 2), rank)
    received = [splits[r][rank] for r in range(size)]
    cs = [upstream(("a2a", r), (sum(splits[k][r] for k in range(size)), 2), 1)[0] for r in range(size)]
    y, got = thvd.alltoall(x, splits=splits[rank])
    assert got.tolist() == received
    y.backward(cs[rank])
    # row block j of my input went to rank j, landing after the blocks of ranks < me there
    expected = []
    for j in range(size):
        offset = sum(splits[k][j] for k in range(rank))
        expected.append(cs[j][offset: offset + splits[rank][j]])
    torch.testing.assert_close(x.grad, torch.cat(expected), rtol=0, atol=0)


def test_reducescatter_gradient(thvd):
    size, rank = thvd.size(), thvd.rank()
    rows = 2 * size + 1
    counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
    for op, pre, post in (("Sum", 1.0, 1.0), ("Average", 1.0, 1.0), ("Sum", 0.5, 4.0)):
        x = leaf(("rs", op), (rows, 2), rank)
        cs = [upstream(("rs", op, r), (counts[r], 2), 1)[0] for r in range(size)]
        y = thvd.reducescatter(x, op=getattr(thvd, op), prescale_factor=pre, postscale_factor=post)
        y.backward(cs[rank])
        expected = torch.cat(cs) * pre * post / (size if op == "Average" else 1)
        torch.testing.assert_close(x.grad, expected, rtol=1e-12, atol=1e-12)
    xs = [leaf("grs0", (size, 2), rank), leaf("grs1", (2 * size,), rank)]
    ys = thvd.grouped_reducescatter(xs, op=thvd.Sum)
    cs0 = [upstream(("grs0", r), (1, 2), 1)[0] for r in range(size)]
    cs1 = [upstream(("grs1", r), (2,), 1)[0] for r in range(size)]
    torch.autograd.backward(ys, [cs0[rank], cs1[rank]])
    torch.testing.assert_close(xs[0].grad, torch.cat(cs0))
    torch.testing.assert_close(xs[1].grad, torch.cat(cs1))


def test_fp16_and_bf16_compression(thvd):
    size, rank = thvd.size(), thvd.rank()
    x = torch.linspace(-1, 1, 50, dtype=torch.float32) * (rank + 1)
    exact = torch.linspace(-1, 1, 50, dtype=torch.float32) * (size + 1) / 2
    for compression, tol in ((thvd.Compression.fp16, 2e-3), (thvd.Compression.bf16, 2e-2)):
        out = thvd.allreduce(x, compression=compression)
        assert out.dtype == torch.float32
        torch.testing.assert_close(out, exact, rtol=tol, atol=tol)
    ints = thvd.allreduce(torch.ones(3, dtype=torch.int32), op=thvd.Sum, compression=thvd.Compression.fp16)
    assert ints.dtype == torch.int32 and ints.tolist() == [size] * 3


# --- bad input, objects, barrier, join -----------------------------------------------------------


def test_bad_input_raises_naming_the_tensor_on_every_rank(thvd, comm):
    size, rank = thvd.size(), thvd.rank()
    for dtype in (torch.complex64, torch.complex128):
        expect_raise_on_every_rank(comm, TypeError, lambda: thvd.allreduce(torch.zeros(3, dtype=dtype), name="t.bad.dtype"),
                                   must_contain=["t.bad.dtype", str(dtype)], what=f"allreduce of {dtype}")
    # bool is moved by every collective but never reduced (int16 is reduced: ranks_horovod_compat.py)
    expect_raise_on_every_rank(comm, ValueError, lambda: thvd.allreduce(torch.zeros(3, dtype=torch.bool), name="t.bool"),
                               must_contain=["t.bool", "bool"], what="allreduce of bool")
    expect_raise_on_every_rank(comm, TypeError, lambda: thvd.allgather([1, 2], name="t.bad.list"),
                               must_contain=["t.bad.list", "torch.Tensor"], what="allgather of a list")
    expect_raise_on_every_rank(comm, ValueError,
                               lambda: thvd.broadcast(torch.zeros(2, device="meta"), 0, name="t.bad.meta"),
                               must_contain=["t.bad.meta", "meta"], what="broadcast of a meta tensor")
    if size > 1:
        # shapes (and dtypes) that differ between ranks: an error from the coordinator, on every rank
        expect_raise_on_every_rank(comm, thvd.HoroError,
                                   lambda: thvd.allreduce(torch.zeros(2 + rank), name="t.bad.shape"),
                                   must_contain=["t.bad.shape"], what="mismatched shapes")
        dt = torch.float32 if rank == 0 else torch.float64
        expect_raise_on_every_rank(comm, thvd.HoroError,
                                   lambda: thvd.allreduce(torch.zeros(2, dtype=dt), name="t.bad.dtype.mismatch"),
                                   must_contain=["t.bad.dtype.mismatch"], what="mismatched dtypes")
        rows = 3 if rank == 0 else 2
        expect_raise_on_every_rank(comm, thvd.HoroError,
                                   lambda: thvd.allgather(torch.zeros(2, rows), name="t.bad.allgather"),
                                   must_contain=["t.bad.allgather"], what="allgather with different trailing dims")
    # still healthy afterwards
    assert thvd.allreduce(torch.ones(2), op=thvd.Sum, name="t.after.errors").tolist() == [size, size]


def test_objects_barrier_join(thvd):
    size, rank = thvd.size(), thvd.rank()
    assert thvd.broadcast_object({"rank": rank, "t": torch.arange(3)}, root_rank=size - 1)["rank"] == size - 1
    assert thvd.allgather_object(("r", rank)) == [("r", r) for r in range(size)]
    thvd.barrier()
    assert thvd.join() in range(size)
    assert thvd.mpi_built()
    # Loaded at run time: "built" means loadable here (tests/test_gpu_libraries.py checks the values).
    assert (thvd.nccl_built() != 0) == (horo.nccl_version() is not None and thvd.cuda_built()), thvd.nccl_built()
    assert thvd.is_initialized() and 0 <= thvd.local_rank() < thvd.local_size()
