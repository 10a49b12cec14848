"""Bad input to the new collectives raises horo.HoroError on EVERY rank, naming the
tensor, and never hangs; the engine keeps working afterwards.

Runs inside each MPI rank. Cross-rank mismatches need at least two ranks (skipped in
a world of one); roots outside the world and bad alltoall splits are checked at every size.
"""
import numpy as np
import pytest

from horo_reference import check_result, make_rank_inputs
from rank_helpers import expect_raise_on_every_rank, gather_and_compare

needs_two_ranks = pytest.mark.skipif(
    __import__("mpi4py.MPI", fromlist=["MPI"]).COMM_WORLD.Get_size() < 2, reason="needs at least two ranks"
)

ROOTED = ["broadcast", "broadcast_", "broadcast_async", "gather", "scatter", "reduce"]


def call_rooted(hvd, entry, x, root, name):
    if entry == "broadcast":
        return hvd.broadcast(x, root, name=name)
    if entry == "broadcast_":
        return hvd.broadcast_(x, root, name=name)
    if entry == "broadcast_async":
        return hvd.synchronize(hvd.broadcast_async(x, root, name=name))
    if entry == "gather":
        return hvd.gather(x, root_rank=root, name=name)
    if entry == "scatter":
        return hvd.scatter(x, root_rank=root, name=name)
    if entry == "reduce":
        return hvd.reduce(x, root_rank=root, op=hvd.Sum, name=name)
    raise ValueError(entry)


# every collective that takes a tensor, called with a name: entry -> fn(hvd, x, name)
COLLECTIVES = {
    "allgather": lambda hvd, x, name: hvd.allgather(x, name=name),
    "allgather_async": lambda hvd, x, name: hvd.synchronize(hvd.allgather_async(x, name=name)),
    "broadcast": lambda hvd, x, name: hvd.broadcast(x, 0, name=name),
    "broadcast_": lambda hvd, x, name: hvd.broadcast_(x, 0, name=name),
    "alltoall": lambda hvd, x, name: hvd.alltoall(x, name=name),
    "reducescatter": lambda hvd, x, name: hvd.reducescatter(x, op=hvd.Sum, name=name),
    "gather": lambda hvd, x, name: hvd.gather(x, 0, name=name),
    "scatter": lambda hvd, x, name: hvd.scatter(x, 0, name=name),
    "reduce": lambda hvd, x, name: hvd.reduce(x, 0, op=hvd.Sum, name=name),
    "allreduce": lambda hvd, x, name: hvd.allreduce(x, op=hvd.Sum, name=name),
}


# ------------------------------------------------------------------ shapes


@needs_two_ranks
@pytest.mark.parametrize("entry", ["allgather", "allgather_async", "gather"])
@pytest.mark.parametrize("who", ["first", "last"])
def test_mismatched_trailing_dims_raise_on_every_rank(hvd, comm, entry, who):
    size, rank = hvd.size(), hvd.rank()
    name = f"err.trailing.{entry}.{who}"
    odd = rank == (0 if who == "first" else size - 1)
    x = np.ones((2 + rank, 13 if odd else 17), dtype=np.float32)  # first dims differ legitimately
    fn = COLLECTIVES[entry]
    expect_raise_on_every_rank(comm, hvd.HoroError, lambda: fn(hvd, x, name), (name, "13", "17"), what=name)


@needs_two_ranks
@pytest.mark.parametrize("entry", ["allgather", "alltoall", "gather"])
def test_mismatched_number_of_dims_raise_on_every_rank(hvd, comm, entry):
    rank = hvd.rank()
    name = f"err.ndim.{entry}"
    x = np.ones((4, 3) if rank == 0 else (4, 3, 1), dtype=np.int32)
    fn = COLLECTIVES[entry]
    expect_raise_on_every_rank(comm, hvd.HoroError, lambda: fn(hvd, x, name), (name,), what=name)


@needs_two_ranks
@pytest.mark.parametrize("entry", ["broadcast", "broadcast_", "reducescatter", "scatter", "reduce"])
def test_mismatched_shapes_raise_on_every_rank(hvd, comm, entry):
    """These need the same shape on every rank (including the first dimension)."""
    rank = hvd.size() - 1 - hvd.rank()
    name = f"err.shape.{entry}"
    x = np.ones((7 if rank == 0 else 9, 2), dtype=np.float64)
    fn = COLLECTIVES[entry]
    expect_raise_on_every_rank(comm, hvd.HoroError, lambda: fn(hvd, x, name), (name,), what=name)


# ------------------------------------------------------------------ dtypes


@needs_two_ranks
@pytest.mark.parametrize("entry", sorted(COLLECTIVES))
def test_mismatched_dtypes_raise_on_every_rank(hvd, comm, entry):
    rank, size = hvd.rank(), hvd.size()
    name = f"err.dtype.{entry}"
    x = np.ones((2 * size, 3), dtype=np.int32 if rank == size - 1 else np.float32)  # same itemsize
    fn = COLLECTIVES[entry]
    expect_raise_on_every_rank(comm, hvd.HoroError, lambda: fn(hvd, x, name), (name, "int32", "float32"), what=name)


@needs_two_ranks
def test_mismatched_dtypes_in_a_grouped_call_raise_on_every_rank(hvd, comm):
    rank = hvd.rank()
    name = "err.grouped"
    xs = [np.ones((2, 2), np.float32), np.ones((3, 2), np.int64 if rank == 0 else np.float64)]
    expect_raise_on_every_rank(comm, hvd.HoroError, lambda: hvd.grouped_allgather(xs, name=name), (name,), what=name)
    expect_raise_on_every_rank(
        comm, hvd.HoroError, lambda: hvd.grouped_reducescatter(xs, op=hvd.Sum, name=name + ".rs"), (name,), what=name
    )


@needs_two_ranks
def test_mismatched_reducescatter_op_raises_on_every_rank(hvd, comm):
    name = "err.rs.op"
    x = np.ones(8, dtype=np.float32)
    op = hvd.Sum if hvd.rank() == 0 else hvd.Max
    expect_raise_on_every_rank(
        comm, hvd.HoroError, lambda: hvd.reducescatter(x, op=op, name=name), (name, "sum", "max"), what=name
    )


# ------------------------------------------------------------------ roots


@needs_two_ranks
@pytest.mark.parametrize("entry", ROOTED)
def test_mismatched_roots_raise_on_every_rank(hvd, comm, entry):
    size, rank = hvd.size(), hvd.rank()
    name = f"err.root.{entry}"
    x = np.ones((size, 2), dtype=np.float32)
    root = 1 if rank == size - 1 else 0
    expect_raise_on_every_rank(comm, hvd.HoroError, lambda: call_rooted(hvd, entry, x, root, name), (name,), what=name)


@pytest.mark.parametrize("where", ["size", "size+1", "-1"])
@pytest.mark.parametrize("entry", ROOTED)
def test_root_outside_the_world_raises_on_every_rank(hvd, comm, entry, where):
    size = hvd.size()
    root = {"size": size, "size+1": size + 1, "-1": -1}[where]
    name = f"err.outside.{entry}.{where}"
    x = np.arange(2 * size, dtype=np.int64)
    before = x.copy()
    expect_raise_on_every_rank(comm, hvd.HoroError, lambda: call_rooted(hvd, entry, x, root, name), (name,), what=name)
    assert np.array_equal(x, before), f"{name}: a failed call modified its tensor"


@pytest.mark.parametrize("where", ["size", "-1"])
def test_broadcast_object_from_a_root_outside_the_world_raises_on_every_rank(hvd, comm, where):
    root = hvd.size() if where == "size" else -1
    expect_raise_on_every_rank(
        comm, hvd.HoroError, lambda: hvd.broadcast_object({"a": 1}, root_rank=root), (), what=f"broadcast_object {where}"
    )


# ------------------------------------------------------------------ alltoall splits


@pytest.mark.parametrize("bad", ["sum_short", "sum_long", "negative", "too_few", "too_many"])
def test_bad_alltoall_splits_on_one_rank_raise_on_every_rank(hvd, comm, bad):
    size, rank = hvd.size(), hvd.rank()
    name = f"err.splits.{bad}"
    x = np.ones((2 * size, 3), dtype=np.float32)
    splits = [2] * size
    if rank == size - 1:
        if bad == "sum_short":
            splits[0] = 1
        elif bad == "sum_long":
            splits[-1] = 3
        elif bad == "negative":  # sums to the first dimension, but one count is negative
            splits = [-1, 3] + [2] * (size - 2) if size >= 2 else [-1]
        elif bad == "too_few":
            splits = splits[:-1] if size > 1 else []
        elif bad == "too_many":
            splits = splits + [0]
    expect_raise_on_every_rank(
        comm, hvd.HoroError, lambda: hvd.alltoall(x, splits=splits, name=name), (name,), what=f"{name} {splits}"
    )


# ------------------------------------------------------------------ one name, different collectives


@needs_two_ranks
@pytest.mark.parametrize(
    "first,others",
    [("allreduce", "broadcast"), ("allgather", "reducescatter"), ("gather", "scatter"), ("alltoall", "allgather"),
     ("reduce", "allreduce"), ("broadcast_", "reduce")],
)
def test_same_name_for_different_collectives_raises_on_every_rank(hvd, comm, first, others):
    size, rank = hvd.size(), hvd.rank()
    name = f"err.kind.{first}.{others}"
    x = np.ones((2 * size, 2), dtype=np.float32)
    fn = COLLECTIVES[first if rank == 0 else others]
    expect_raise_on_every_rank(comm, hvd.HoroError, lambda: fn(hvd, x, name), (name,), what=name)


@needs_two_ranks
def test_same_name_barrier_versus_allreduce_raises_on_every_rank(hvd, comm):
    name = "err.kind.barrier"
    x = np.ones(4, dtype=np.float32)
    if hvd.rank() == 0:
        fn = lambda: hvd.barrier(name=name)  # noqa: E731
    else:
        fn = lambda: hvd.allreduce(x, op=hvd.Sum, name=name)  # noqa: E731
    expect_raise_on_every_rank(comm, hvd.HoroError, fn, (name,), what=name)


@needs_two_ranks
def test_a_failure_among_async_collectives_fails_only_that_one(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    good = [make_rank_inputs(("bystander", i), "int64", (2 * size + 1, 2), "Sum", "wide", size) for i in range(3)]
    h0 = hvd.allgather_async(good[0][rank], name="bystander.ag")
    bad = hvd.allgather_async(np.ones((1, 3 + (rank == 0)), np.float32), name="err.among")
    h1 = hvd.reducescatter_async(good[1][rank], op=hvd.Sum, name="bystander.rs")
    h2 = hvd.broadcast_async(good[2][rank], size - 1, name="bystander.bc")
    expect_raise_on_every_rank(comm, hvd.HoroError, lambda: hvd.synchronize(bad), ("err.among",), what="err.among")
    assert np.array_equal(hvd.synchronize(h0), np.concatenate(good[0]))
    rows = 2 * size + 1
    start = rank * (rows // size) + min(rank, rows % size)
    count = rows // size + (rank < rows % size)
    check_result(hvd.synchronize(h1), [g[start : start + count] for g in good[1]], "Sum", True, what="bystander rs")
    assert np.array_equal(hvd.synchronize(h2), good[2][size - 1])


# ------------------------------------------------------------------ local errors


@pytest.mark.parametrize("entry", sorted(set(COLLECTIVES) - {"allreduce"}))
def test_unsupported_dtype_and_non_contiguous_raise_on_every_rank(hvd, comm, entry):
    fn = COLLECTIVES[entry]
    name = f"err.local.{entry}"
    x = np.ones((4, 2), np.complex64)
    expect_raise_on_every_rank(comm, TypeError, lambda: fn(hvd, x, name + ".c64"), (name, "complex64"), what=name)
    y = np.ones((4, 6), np.float32)[:, ::2]
    expect_raise_on_every_rank(comm, ValueError, lambda: fn(hvd, y, name + ".strided"), (name, "contiguous"), what=name)


# ------------------------------------------------------------------ afterwards


def test_engine_works_after_the_errors_and_failed_names_can_be_reused(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    names = ["err.outside.broadcast.size", "err.outside.gather.-1", "err.splits.sum_short", "err.local.allgather.c64"]
    if size >= 2:
        names += ["err.trailing.allgather.first", "err.dtype.reducescatter", "err.root.scatter", "err.kind.allreduce.broadcast",
                  "err.kind.gather.scatter", "err.among"]
    for i, name in enumerate(names):
        inputs = [make_rank_inputs((name, r), "int32", (r + 1, 3), "Sum", "wide", 1)[0] for r in range(size)]
        # each name now used for a different collective than before, consistently on every rank
        out = hvd.allgather(inputs[rank], name=name)
        assert np.array_equal(out, np.concatenate(inputs)), name
        b = hvd.broadcast(inputs[rank][:1], i % size, name=name + ".again")
        assert np.array_equal(b, inputs[i % size][:1]), name
    hvd.barrier()
    assert hvd.broadcast_object(("done", size), root_rank=size - 1) == ("done", size)
    gather_and_compare(comm, True, "reached the end")


# ------------------------------------------------------------------ the message names the root the caller passed


@pytest.mark.parametrize("where", ["size", "size+3", "-1"])
@pytest.mark.parametrize("entry", ["broadcast", "gather", "scatter", "reduce"])
def test_root_outside_the_world_error_names_the_root_that_was_passed(hvd, comm, entry, where):
    """Last in the file (the suite stops at the first failure): a message that reports
    another root than the caller's (e.g. an internal index) misleads the user."""
    import re

    size = hvd.size()
    root = {"size": size, "size+3": size + 3, "-1": -1}[where]
    name = f"err.rootmsg.{entry}.{where}"
    x = np.arange(2 * size, dtype=np.int64)
    exc = expect_raise_on_every_rank(comm, hvd.HoroError, lambda: call_rooted(hvd, entry, x, root, name), (name,), what=name)
    reported = [int(m) for m in re.findall(r"root(?:_rank| rank)?\D{0,3}?(-?\d+)", str(exc))]
    ok = reported == [root] or (not reported and str(root) in str(exc))
    every = comm.allgather((ok, str(exc)[:300]))
    bad = [f"  rank {r}: {msg}" for r, (r_ok, msg) in enumerate(every) if not r_ok]
    assert not bad, f"{name}: the error should name root {root}, the one passed:\n" + "\n".join(bad)
