"""allreduce on every rank: each op x dtype x in-place/out-of-place against NumPy.

Runs inside each MPI rank (see conftest.py in this folder for how to launch it).
Every result must equal the NumPy reference (exactly where the spec pins it down,
within a rounding tolerance where the summation order is free) and must be
bit-identical on all ranks (digests compared with mpi4py).
"""
import numpy as np
import pytest

from horo_reference import (
    DTYPES,
    FLOAT_DTYPES,
    INT_DTYPES,
    OPS,
    check_result,
    digest,
    is_int,
    kinds_for,
    make_rank_inputs,
    must_be_exact,
    np_dtype,
)
from rank_helpers import gather_and_compare

# () is a 0-d array; (0,) and (2, 0, 3) are empty; 7, 1015 and 4099 elements are
# not divisible by 2, 3 or 4 ranks (ring chunks of unequal length).
SHAPES = [(), (0,), (1,), (7,), (2, 0, 3), (5, 203), (4099,)]


def _op(hvd, op):
    return getattr(hvd, op)


def _check_and_record(store, comm_digests, key, result, inputs, op, exact, pre=1.0, post=1.0):
    exact, tol = check_result(result, inputs, op, exact, pre, post, what=key)
    store.add(key, result, exact, tol)
    comm_digests.append((key, digest(result)))


def test_rank_and_size_agree_with_mpi(hvd, comm):
    assert hvd.is_initialized()
    assert hvd.size() == comm.Get_size()
    assert hvd.rank() == comm.Get_rank()
    # the launcher starts every rank on this one host
    assert hvd.local_size() == comm.Get_size()
    assert hvd.local_rank() == comm.Get_rank()
    assert hvd.cross_size() == 1
    assert hvd.cross_rank() == 0
    assert isinstance(hvd.mpi_threads_supported(), bool)
    gather_and_compare(comm, (hvd.size(), hvd.local_size(), hvd.cross_size()), "size/local_size/cross_size")


@pytest.mark.parametrize("inplace", [False, True], ids=["out_of_place", "in_place"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_allreduce_matches_numpy_reference_on_every_rank(hvd, comm, store, op, dtype, inplace):
    """Sync calls (auto-generated names) on one data kind, async calls (explicit
    names, synchronised in reverse order) on the other, every shape in SHAPES."""
    size, rank = hvd.size(), hvd.rank()
    sync_kind, async_kind = kinds_for(dtype)
    mode = "in_place" if inplace else "out_of_place"
    case = f"allreduce.{op}.{dtype}.{mode}"
    digests = []

    for shape in SHAPES:
        key = f"{case}.sync.{shape}"
        inputs = make_rank_inputs(key, dtype, shape, op, sync_kind, size)
        x = inputs[rank].copy()
        if inplace:
            out = hvd.allreduce_(x, op=_op(hvd, op))
            assert out is x, f"{key}: allreduce_ must return the array it was given"
        else:
            out = hvd.allreduce(x, op=_op(hvd, op))
            assert x.tobytes() == inputs[rank].tobytes(), f"{key}: out-of-place allreduce modified its input"
            assert out is not x and (out.size == 0 or not np.shares_memory(out, x)), f"{key}: output aliases input"
        _check_and_record(store, digests, key, out, inputs, op, must_be_exact(dtype, op, sync_kind, size))

    pending = []
    for i, shape in enumerate(SHAPES):
        key = f"{case}.async.{shape}"
        inputs = make_rank_inputs(key, dtype, shape, op, async_kind, size)
        x = inputs[rank].copy()
        enqueue = hvd.allreduce_async_ if inplace else hvd.allreduce_async
        handle = enqueue(x, name=f"{case}.{i}", op=_op(hvd, op))
        pending.append((key, handle, x, inputs))
    for key, handle, x, inputs in reversed(pending):
        out = hvd.synchronize(handle)
        exact = must_be_exact(dtype, op, async_kind, size)
        _check_and_record(store, digests, key, out, inputs, op, exact)
        if inplace:
            check_result(x, inputs, op, exact, what=f"{key} (the in-place input array)")
        else:
            assert x.tobytes() == inputs[rank].tobytes(), f"{key}: out-of-place allreduce_async modified its input"

    gather_and_compare(comm, digests, f"{case} result digests")


@pytest.mark.parametrize("dtype", ["uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"])
def test_large_odd_sized_tensors_sum_and_average(hvd, comm, store, dtype):
    """Big enough for the ring's chunking (and auto's algorithm switch) to matter."""
    size, rank = hvd.size(), hvd.rank()
    digests = []
    shape = (262147,)  # 2**18 + 3: odd, not divisible by 3 or 4
    for op, kind in (("Sum", kinds_for(dtype)[1]), ("Average", kinds_for(dtype)[0])):
        key = f"large.{op}.{dtype}"
        inputs = make_rank_inputs(key, dtype, shape, op, kind, size)
        out = hvd.allreduce(inputs[rank], op=_op(hvd, op), name=key)
        _check_and_record(store, digests, key, out, inputs, op, must_be_exact(dtype, op, kind, size))
    gather_and_compare(comm, digests, f"large {dtype} digests")


def _scale_cases(dtype):
    if is_int(np_dtype(dtype)):
        # (op, prescale, postscale); integer Average with a postscale is left out
        # because the spec does not say whether 1/size and postscale round once or twice.
        return [
            ("Sum", 0.5, 1.0),  # per rank in float64, truncated (1.5 -> 1, -2.5 -> -2), as Horovod
            ("Sum", 1.5, 1.0),
            ("Sum", 1.0, 0.5),
            ("Sum", 1.5, 2.0),
            ("Average", 1.5, 1.0),
            ("Max", 0.5, 2.0),
            ("Min", 2.0, 1.0),
            ("Product", 1.0, 0.5),
        ]
    return [
        ("Sum", 0.5, 1.0),
        ("Sum", 1.0, 0.25),
        ("Average", 2.0, 0.5),
        ("Average", 0.5, 4.0),
        ("Max", 4.0, 0.5),
        ("Min", 0.5, 2.0),
        ("Product", 0.5, 2.0),
        ("Sum", 0.1, 3.0),  # not powers of two: within rounding of the reference
    ]


@pytest.mark.parametrize("dtype", DTYPES)
def test_prescale_and_postscale_match_numpy_reference(hvd, comm, store, dtype):
    size, rank = hvd.size(), hvd.rank()
    digests = []
    for j, (op, pre, post) in enumerate(_scale_cases(dtype)):
        for shape in ((7,), (0,), (3, 5)):
            key = f"scale.{dtype}.{op}.pre{pre}.post{post}.{shape}"
            inputs = make_rank_inputs(key, dtype, shape, op, "scale", size)
            out = hvd.allreduce(inputs[rank], op=_op(hvd, op), prescale_factor=pre, postscale_factor=post)
            exact = must_be_exact(dtype, op, "scale", size, pre, post)
            _check_and_record(store, digests, key, out, inputs, op, exact, pre, post)
        # in place and async with the same factors
        key = f"scale.{dtype}.{op}.pre{pre}.post{post}.async_inplace"
        inputs = make_rank_inputs(key, dtype, (9,), op, "scale", size)
        x = inputs[rank].copy()
        h = hvd.allreduce_async_(x, name=key, op=_op(hvd, op), prescale_factor=pre, postscale_factor=post)
        out = hvd.synchronize(h)
        exact = must_be_exact(dtype, op, "scale", size, pre, post)
        _check_and_record(store, digests, key, out, inputs, op, exact, pre, post)
        check_result(x, inputs, op, exact, pre, post, what=f"{key} (the in-place input array)")
    gather_and_compare(comm, digests, f"scaled {dtype} digests")


GROUP_SHAPES = [(0,), (1,), (7,), (5, 203), (4099,), ()]


@pytest.mark.parametrize("dtype", ["int8", "int64", "float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("variant", ["sync", "sync_in_place", "async", "async_in_place"])
@pytest.mark.parametrize("op", ["Sum", "Average", "Max"])
def test_grouped_allreduce_matches_numpy_reference(hvd, comm, store, op, variant, dtype):
    size, rank = hvd.size(), hvd.rank()
    kind = kinds_for(dtype)[0]
    case = f"grouped.{op}.{variant}.{dtype}"
    pre, post = (0.5, 2.0) if not is_int(np_dtype(dtype)) and op != "Max" else (1.0, 1.0)
    all_inputs = [make_rank_inputs(f"{case}.{i}", dtype, s, op, kind, size) for i, s in enumerate(GROUP_SHAPES)]
    xs = [inp[rank].copy() for inp in all_inputs]
    kw = dict(op=_op(hvd, op), prescale_factor=pre, postscale_factor=post)
    if variant == "sync":
        outs = hvd.grouped_allreduce(xs, name=case, **kw)
    elif variant == "sync_in_place":
        outs = hvd.grouped_allreduce_(xs, name=case, **kw)
    elif variant == "async":
        handles = hvd.grouped_allreduce_async(xs, name=case, **kw)
        assert len(handles) == len(xs)
        outs = [hvd.synchronize(h) for h in handles]
    else:
        handles = hvd.grouped_allreduce_async_(xs, name=case, **kw)
        assert len(handles) == len(xs)
        outs = [hvd.synchronize(h) for h in handles]
    outs = list(outs)
    assert len(outs) == len(xs)
    digests = []
    exact = must_be_exact(dtype, op, kind, size, pre, post)
    for i, (out, inputs, x) in enumerate(zip(outs, all_inputs, xs)):
        key = f"{case}.{i}"
        _check_and_record(store, digests, key, out, inputs, op, exact, pre, post)
        if variant.endswith("in_place"):
            check_result(x, inputs, op, exact, pre, post, what=f"{key} (the in-place input array)")
        else:
            assert x.tobytes() == inputs[rank].tobytes(), f"{key}: out-of-place grouped allreduce modified its input"
    gather_and_compare(comm, digests, f"{case} digests")


def test_grouped_allreduce_with_default_op_averages(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    groups = [make_rank_inputs(("grouped.default", i), "float64", (6,), "Average", "exact", size) for i in range(3)]
    outs = hvd.grouped_allreduce([g[rank] for g in groups])
    for out, inputs in zip(outs, groups):
        check_result(out, inputs, "Average", must_be_exact("float64", "Average", "exact", size), what="grouped default op")


def test_default_op_is_average_and_average_flag_selects_sum_or_average(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    inputs = make_rank_inputs("default-op", "float32", (11,), "Average", "exact", size)
    exact = must_be_exact("float32", "Average", "exact", size)
    check_result(hvd.allreduce(inputs[rank]), inputs, "Average", exact, what="allreduce(x)")
    check_result(hvd.allreduce(inputs[rank], average=True), inputs, "Average", exact, what="average=True")
    check_result(hvd.allreduce(inputs[rank], average=False), inputs, "Sum", True, what="average=False")
    check_result(hvd.allreduce(inputs[rank], op=hvd.Sum), inputs, "Sum", True, what="op=Sum")
    iinputs = make_rank_inputs("default-op-int", "int32", (11,), "Average", "narrow", size)
    check_result(hvd.allreduce(iinputs[rank]), iinputs, "Average", True, what="int32 allreduce(x)")


def test_async_calls_with_auto_generated_names_in_the_same_order(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    cases = [make_rank_inputs(("autoname", i), "int32", (i,), "Sum", "narrow", size) for i in range(12)]
    handles = [hvd.allreduce_async(c[rank], op=hvd.Sum) for c in cases]
    for h, c in zip(handles, cases):
        check_result(hvd.synchronize(h), c, "Sum", True, what="auto-named async")


def test_same_name_can_be_reused_once_the_previous_call_completed(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    for it in range(6):
        inputs = make_rank_inputs(("reuse", it), "float64", (13,), "Sum", "exact", size)
        check_result(hvd.allreduce(inputs[rank], name="reused.name", op=hvd.Sum), inputs, "Sum", True, what=f"it {it}")
        inputs = make_rank_inputs(("reuse-async", it), "int8", (5,), "Max", "wide", size)
        h = hvd.allreduce_async(inputs[rank], name="reused.async", op=hvd.Max)
        check_result(hvd.synchronize(h), inputs, "Max", True, what=f"async it {it}")


def test_contiguous_views_with_an_offset_are_reduced_correctly(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    inputs = make_rank_inputs("views", "float32", (40,), "Sum", "exact", size)
    base = inputs[rank].copy()
    view = base[3:20]  # C-contiguous, but not at the start of its buffer
    out = hvd.allreduce(view, op=hvd.Sum)
    check_result(out, [i[3:20] for i in inputs], "Sum", True, what="offset view")
    hvd.allreduce_(view, op=hvd.Sum)
    check_result(view, [i[3:20] for i in inputs], "Sum", True, what="offset view in place")
    assert base[:3].tobytes() == inputs[rank][:3].tobytes(), "in-place allreduce wrote before the view"
    assert base[20:].tobytes() == inputs[rank][20:].tobytes(), "in-place allreduce wrote past the view"
    rows = inputs[rank].reshape(8, 5).copy()[2:6]  # contiguous row block of a 2-D array
    out = hvd.allreduce(rows, op=hvd.Sum)
    check_result(out, [i.reshape(8, 5)[2:6] for i in inputs], "Sum", True, what="row block")


def test_out_of_place_allreduce_accepts_a_read_only_input(hvd, comm):
    size, rank = hvd.size(), hvd.rank()
    inputs = make_rank_inputs("readonly", "float64", (9,), "Sum", "exact", size)
    x = inputs[rank].copy()
    x.flags.writeable = False
    check_result(hvd.allreduce(x, op=hvd.Sum), inputs, "Sum", True, what="read-only input")


@pytest.mark.parametrize("dtype", INT_DTYPES + FLOAT_DTYPES)
def test_min_max_exact_for_every_rank_count(hvd, comm, dtype):
    """Min/Max never round: equal to NumPy for any number of ranks, any data."""
    size, rank = hvd.size(), hvd.rank()
    for op in ("Min", "Max"):
        kind = kinds_for(dtype)[1]
        inputs = make_rank_inputs(("minmax", op, dtype), dtype, (1001,), op, kind, size)
        check_result(hvd.allreduce(inputs[rank], op=_op(hvd, op)), inputs, op, True, what=f"{op} {dtype}")
