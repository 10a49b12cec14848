"""Bad input raises a clear exception on every rank involved, and nothing hangs.

Runs inside each MPI rank. Cross-rank mismatches need at least two ranks (they
are skipped in a world of one); local errors (dtype, contiguity) are checked at
every size. After all of it the engine must still reduce correctly.
"""
import ctypes

import numpy as np
import pytest

from horo_reference import check_result, make_rank_inputs
from rank_helpers import expect_raise_on_every_rank, gather_and_compare

needs_two_ranks = pytest.mark.skipif(
    __import__("mpi4py.MPI", fromlist=["MPI"]).COMM_WORLD.Get_size() < 2, reason="needs at least two ranks"
)


def _odd_one_out(rank, size, who):
    return rank == (0 if who == "first" else size - 1)


@needs_two_ranks
@pytest.mark.parametrize("who", ["first", "last"])
def test_mismatched_shapes_raise_on_every_rank(hvd, comm, who):
    name = f"mismatch.shape.{who}"
    odd = _odd_one_out(hvd.rank(), hvd.size(), who)
    x = np.ones(17 if odd else 19, dtype=np.float32)
    expect_raise_on_every_rank(
        comm, hvd.HoroError, lambda: hvd.allreduce(x, name=name, op=hvd.Sum), (name, "17", "19"), what=name
    )


@needs_two_ranks
def test_mismatched_multi_dimensional_shapes_raise_on_every_rank(hvd, comm):
    name = "mismatch.shape.2d"
    x = np.ones((3, 4) if hvd.rank() == 0 else (4, 3), dtype=np.int32)
    expect_raise_on_every_rank(comm, hvd.HoroError, lambda: hvd.allreduce(x, name=name, op=hvd.Sum), (name,), what=name)


@needs_two_ranks
@pytest.mark.parametrize("who", ["first", "last"])
def test_mismatched_dtypes_raise_on_every_rank(hvd, comm, who):
    name = f"mismatch.dtype.{who}"
    odd = _odd_one_out(hvd.rank(), hvd.size(), who)
    x = np.ones(8, dtype=np.float32 if odd else np.float64)
    expect_raise_on_every_rank(
        comm, hvd.HoroError, lambda: hvd.allreduce(x, name=name, op=hvd.Sum), (name, "float32", "float64"), what=name
    )


@needs_two_ranks
def test_mismatched_dtypes_of_equal_itemsize_raise_on_every_rank(hvd, comm):
    name = "mismatch.dtype.samesize"
    x = np.ones(8, dtype=np.int32 if hvd.rank() == 0 else np.float32)
    expect_raise_on_every_rank(
        comm, hvd.HoroError, lambda: hvd.allreduce(x, name=name, op=hvd.Sum), (name, "int32", "float32"), what=name
    )


@needs_two_ranks
@pytest.mark.parametrize("who", ["first", "last"])
def test_mismatched_ops_raise_on_every_rank(hvd, comm, who):
    name = f"mismatch.op.{who}"
    odd = _odd_one_out(hvd.rank(), hvd.size(), who)
    x = np.ones(8, dtype=np.float32)
    op = hvd.Sum if odd else hvd.Max
    expect_raise_on_every_rank(
        comm, hvd.HoroError, lambda: hvd.allreduce(x, name=name, op=op), (name, "sum", "max"), what=name
    )


@needs_two_ranks
@pytest.mark.parametrize("which", ["prescale_factor", "postscale_factor"])
def test_mismatched_scale_factors_raise_on_every_rank(hvd, comm, which):
    name = f"mismatch.{which}"
    x = np.ones(8, dtype=np.float64)
    kw = {which: 1.0 if hvd.rank() == 0 else 2.0}
    expect_raise_on_every_rank(
        comm, hvd.HoroError, lambda: hvd.allreduce(x, name=name, op=hvd.Sum, **kw), (name,), what=name
    )


@needs_two_ranks
def test_mismatch_in_async_calls_raises_at_synchronize_on_every_rank(hvd, comm):
    name = "mismatch.async"
    x = np.ones(5 if hvd.rank() == 0 else 6, dtype=np.float32)
    handle = hvd.allreduce_async(x, name=name, op=hvd.Sum)  # enqueue itself succeeds
    expect_raise_on_every_rank(comm, hvd.HoroError, lambda: hvd.synchronize(handle), (name,), what=name)


@needs_two_ranks
def test_mismatch_among_other_tensors_fails_only_the_mismatched_one(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    good = [make_rank_inputs(("bystander", i), "float32", (10,), "Sum", "exact", size) for i in range(4)]
    hs = [hvd.allreduce_async(g[rank], name=f"bystander.{i}", op=hvd.Sum) for i, g in enumerate(good[:2])]
    bad = hvd.allreduce_async(np.ones(3 + (rank == 0), np.int32), name="mismatch.among", op=hvd.Sum)
    hs += [hvd.allreduce_async(g[rank], name=f"bystander.{i + 2}", op=hvd.Sum) for i, g in enumerate(good[2:])]
    expect_raise_on_every_rank(comm, hvd.HoroError, lambda: hvd.synchronize(bad), ("mismatch.among",), what="bad")
    for h, g in zip(hs, good):
        check_result(hvd.synchronize(h), g, "Sum", True, what="bystander of a mismatch")


@needs_two_ranks
def test_name_reused_while_in_flight_raises_at_enqueue_on_that_rank(hvd, comm):
    """Rank v enqueues a name twice while the others have not submitted it yet:
    the first call stays in flight, so the second must fail at once (not queue, not hang)."""
    size, rank = hvd.size(), hvd.rank()
    for victim in range(size):
        name = f"inflight.{victim}"
        inputs = make_rank_inputs(name, "float32", (10,), "Sum", "exact", size)
        handle = None
        report = None
        if rank == victim:
            handle = hvd.allreduce_async(inputs[rank], name=name, op=hvd.Sum)
            outcomes = []
            for call in (
                lambda: hvd.allreduce_async(inputs[rank].copy(), name=name, op=hvd.Sum),
                lambda: hvd.allreduce_async_(inputs[rank].copy(), name=name, op=hvd.Sum),
                lambda: hvd.allreduce(inputs[rank].copy(), name=name, op=hvd.Sum),
            ):
                try:
                    call()
                    outcomes.append("no exception")
                except hvd.HoroError as e:
                    outcomes.append("ok" if name in str(e) else f"HoroError without the name: {e}")
                except Exception as e:  # noqa: BLE001
                    outcomes.append(f"{type(e).__name__}: {e}")
            report = outcomes
        comm.Barrier()  # only now do the other ranks submit the name
        if rank != victim:
            handle = hvd.allreduce_async(inputs[rank], name=name, op=hvd.Sum)
        out = hvd.synchronize(handle)
        check_result(out, inputs, "Sum", True, what=f"{name}: the original call")
        reports = comm.allgather(report)
        assert reports[victim] == ["ok", "ok", "ok"], (
            f"rank {victim} re-enqueued '{name}' while in flight "
            f"(allreduce_async, allreduce_async_, allreduce): {reports[victim]}"
        )


UNSUPPORTED = [
    ("complex64", lambda: np.ones(4, np.complex64)),
    ("complex128", lambda: np.ones(4, np.complex128)),
    # bool is supported (moved by every collective, refused by reductions with a ValueError:
    # ranks_horovod_compat.py)
    ("object", lambda: np.array([1, "a", None, 2.0], dtype=object)),
]
if np.dtype(np.longdouble).itemsize > 8:
    UNSUPPORTED.append(("float128", lambda: np.ones(4, np.longdouble)))


@pytest.mark.parametrize("dtype,make", UNSUPPORTED, ids=[u[0] for u in UNSUPPORTED])
@pytest.mark.parametrize("entry", ["allreduce", "allreduce_", "allreduce_async", "allreduce_async_"])
def test_unsupported_dtype_raises_type_error_naming_tensor_and_dtype(hvd, comm, dtype, make, entry):
    name = f"bad.dtype.{dtype}.{entry}"
    x = make()
    fn = getattr(hvd, entry)
    expect_raise_on_every_rank(comm, TypeError, lambda: fn(x, name=name, op=hvd.Sum), (name, dtype), what=name)


@pytest.mark.parametrize("entry", ["grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async"])
def test_unsupported_dtype_in_a_group_raises_type_error(hvd, comm, entry):
    name = f"bad.group.{entry}"
    xs = [np.ones(3, np.float32), np.ones(3, np.complex64)]
    fn = getattr(hvd, entry)
    expect_raise_on_every_rank(comm, TypeError, lambda: fn(xs, name=name, op=hvd.Sum), (name, "complex64"), what=name)


NON_CONTIGUOUS = [
    ("strided", lambda: np.arange(20, dtype=np.float32)[::2]),
    ("transposed", lambda: np.arange(12, dtype=np.float64).reshape(3, 4).T),
    ("fortran", lambda: np.asfortranarray(np.ones((3, 4), np.int32))),
    ("column", lambda: np.ones((4, 5), np.int64)[:, 1]),
]


@pytest.mark.parametrize("kind,make", NON_CONTIGUOUS, ids=[n[0] for n in NON_CONTIGUOUS])
@pytest.mark.parametrize("entry", ["allreduce", "allreduce_", "allreduce_async", "allreduce_async_"])
def test_non_contiguous_array_raises_value_error_naming_tensor(hvd, comm, kind, make, entry):
    name = f"noncontig.{kind}.{entry}"
    x = make()
    assert not x.flags.c_contiguous
    before = x.copy()
    fn = getattr(hvd, entry)
    expect_raise_on_every_rank(comm, ValueError, lambda: fn(x, name=name, op=hvd.Sum), (name, "contiguous"), what=name)
    assert np.array_equal(x, before), "a rejected in-place call must not modify the array"


def test_non_contiguous_array_in_a_group_raises_value_error(hvd, comm):
    name = "noncontig.group"
    xs = [np.ones(4, np.float32), np.arange(8, dtype=np.float32)[::2]]
    expect_raise_on_every_rank(
        comm, ValueError, lambda: hvd.grouped_allreduce(xs, name=name, op=hvd.Sum), (name, "contiguous"), what=name
    )


def c_api_submit(hvd, collective, name, array, dtype_code, op):
    """Submits through the core's C interface (the table horo.tensorflow's op library calls), as
    a framework would; raises HoroError with the core's message when it is refused at once."""
    from horo._native import _core

    class Request(ctypes.Structure):  # struct horo_request, horo/include/horo_c_api.h
        _fields_ = [("collective", ctypes.c_int), ("name", ctypes.c_char_p), ("input", ctypes.c_void_p),
                    ("output", ctypes.c_void_p), ("dtype", ctypes.c_int), ("shape", ctypes.POINTER(ctypes.c_int64)),
                    ("ndim", ctypes.c_int), ("op", ctypes.c_int), ("prescale", ctypes.c_double),
                    ("postscale", ctypes.c_double), ("root", ctypes.c_int),
                    ("splits", ctypes.POINTER(ctypes.c_int64)), ("nsplits", ctypes.c_int),
                    ("process_set", ctypes.c_int)]

    done_fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
    submit_fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Request), done_fn, ctypes.c_void_p,
                                 ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_size_t)

    class Table(ctypes.Structure):  # struct horo_c_api
        _fields_ = [("version", ctypes.c_int), ("submit", submit_fn), ("poll", ctypes.c_void_p),
                    ("process_info", ctypes.c_void_p)]

    table = Table.from_address(_core.c_api_address())
    shape = (ctypes.c_int64 * array.ndim)(*array.shape)
    request = Request(collective, name.encode(), array.ctypes.data, array.ctypes.data, dtype_code, shape, array.ndim,
                      op, 1.0, 1.0, 0, None, 0, 0)
    status, error = ctypes.c_int(0), ctypes.create_string_buffer(1024)
    if table.submit(ctypes.byref(request), done_fn(lambda user, result: None), None, ctypes.byref(status), error,
                    len(error)) == 0:
        raise hvd.HoroError(error.value.decode())
    raise AssertionError(f"{name}: the C interface accepted an unsupported dtype")


@needs_two_ranks
def test_c_api_refusal_on_one_rank_raises_on_every_rank(hvd, comm):
    """A bad argument refused by the C interface on one rank alone reaches the others, whose
    namesakes fail at once: they would otherwise wait forever (no stall shutdown by default)."""
    name = "c_api.bad.dtype"
    x = np.ones(8, dtype=np.float32)
    if hvd.rank() == hvd.size() - 1:
        call = lambda: c_api_submit(hvd, 0, name, x, 99, hvd.Sum)  # noqa: E731 - 0: allreduce; 99: no such dtype
    else:
        call = lambda: hvd.allreduce(x, name=name, op=hvd.Sum)  # noqa: E731
    expect_raise_on_every_rank(comm, hvd.HoroError, call, (name, "unsupported dtype"), what=name)


def test_unnamed_blocking_calls_share_one_name_whatever_their_shapes(hvd, comm):
    """An unnamed blocking call takes its collective's one name (so a loop of them runs from the
    response cache): a shape or dtype that changes from call to call renegotiates under that name,
    and a mismatch across ranks names it on every rank."""
    size, rank = hvd.size(), hvd.rank()
    for step, (dtype, shape) in enumerate([("float32", (3,)), ("int64", (5, 2)), ("float32", (3,)), ("int64", (7,))]):
        kind = "exact" if dtype == "float32" else "wide"
        inputs = make_rank_inputs(("unnamed", step), dtype, shape, "Sum", kind, size)
        check_result(hvd.allreduce(inputs[rank], op=hvd.Sum), inputs, "Sum", True, what=f"unnamed step {step}")
    if size >= 2:
        x = np.ones(3 if rank == 0 else 4, dtype=np.float32)
        err = expect_raise_on_every_rank(comm, hvd.HoroError, lambda: hvd.allreduce(x, op=hvd.Sum),
                                         ("'allreduce.noname'",), what="unnamed mismatch")
        assert "allreduce.noname." not in str(err), err
    inputs = make_rank_inputs("unnamed.after", "float64", (4,), "Sum", "exact", size)
    check_result(hvd.allreduce(inputs[rank], op=hvd.Sum), inputs, "Sum", True, what="unnamed after a mismatch")


def test_names_of_rejected_calls_can_be_used_again(hvd, comm):
    """A call rejected at enqueue (or failed by a mismatch) leaves no state behind."""
    size, rank = hvd.size(), hvd.rank()
    names = ["bad.dtype.complex64.allreduce", "noncontig.strided.allreduce_async", "bad.group.grouped_allreduce"]
    if size >= 2:
        names += ["mismatch.shape.first", "mismatch.dtype.last", "mismatch.op.first", "mismatch.async", "inflight.0"]
    for name in names:
        inputs = make_rank_inputs(("again", name), "float64", (6,), "Sum", "exact", size)
        check_result(hvd.allreduce(inputs[rank], name=name, op=hvd.Sum), inputs, "Sum", True, what=name)


def test_engine_still_reduces_correctly_after_all_the_errors(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    cases = [make_rank_inputs(("after", i), "int64", (i * 7 + 1,), "Sum", "wide", size) for i in range(20)]
    hs = [hvd.allreduce_async(c[rank], name=f"after.{i}", op=hvd.Sum) for i, c in enumerate(cases)]
    for h, c in zip(hs, cases):
        check_result(hvd.synchronize(h), c, "Sum", True, what="after errors")
    gather_and_compare(comm, True, "reached the end")
