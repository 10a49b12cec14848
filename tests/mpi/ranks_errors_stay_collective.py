"""After any error on any rank, every later collective still completes or raises on
every rank: a call refused on one rank only (bad argument there) fails its namesake on
the others instead of leaving them waiting, and a name reused while its collective is still
in flight is refused on that rank (naming the tensor) while the collective goes on.

Runs inside each MPI rank (np >= 2).
"""
import time

import numpy as np
import pytest

from horo_reference import check_result, make_rank_inputs
from rank_helpers import expect_raise_on_every_rank, gather_and_compare

# Until #13's error classes land, a refused argument is a ValueError/TypeError or a HoroError.
REFUSED = (ValueError, TypeError)


@pytest.fixture(autouse=True)
def _needs_two_ranks(comm):
    if comm.Get_size() < 2:
        pytest.skip("needs at least two ranks")


def _wait_until_done(hvd, handle, seconds=60):
    deadline = time.monotonic() + seconds
    while not hvd.poll(handle):
        assert time.monotonic() < deadline, "collective did not finish"
        time.sleep(0.01)


def _refused_on_one_rank(hvd, comm, collective, good, bad, **kwargs):
    """Rank 1 passes `bad` (refused locally); the others' `good` call must raise, not wait."""
    name = f"refused.{collective}"
    fn = getattr(hvd, collective)
    arg = bad() if hvd.rank() == 1 else good()
    exc = expect_raise_on_every_rank(
        comm, REFUSED + (hvd.HoroError,), lambda: fn(arg, name=name, **kwargs), (name,), what=name
    )
    if hvd.rank() != 1:
        assert "rank(s) 1" in str(exc) and "refused" in str(exc), str(exc)


def _strided(dtype=np.float32):
    return np.arange(16, dtype=dtype)[::2]


@pytest.mark.parametrize(
    "collective,kwargs",
    [
        ("allreduce", {"op": 1}),
        ("allgather", {}),
        ("broadcast", {"root_rank": 0}),
        ("alltoall", {}),
        ("reducescatter", {"op": 1}),
    ],
)
def test_bad_argument_on_one_rank_raises_on_every_rank(hvd, comm, collective, kwargs):
    n = hvd.size()
    _refused_on_one_rank(hvd, comm, collective, lambda: np.ones(2 * n, np.float32), lambda: _strided(), **kwargs)


def test_unsupported_dtype_on_one_rank_raises_on_every_rank(hvd, comm):
    _refused_on_one_rank(
        hvd, comm, "allreduce", lambda: np.ones(4, np.float32), lambda: np.ones(4, np.complex64), op=1,
    )


def test_read_only_buffer_on_one_rank_raises_on_every_rank(hvd, comm):
    def read_only():
        a = np.ones(4, np.float32)
        a.flags.writeable = False
        return a

    _refused_on_one_rank(hvd, comm, "allreduce_", lambda: np.ones(4, np.float32), read_only, op=1)


def test_unnamed_collectives_stay_in_step_after_one_rank_refused(hvd, comm):
    """Unnamed calls are numbered in call order: a refused one still takes its number everywhere."""
    x = _strided() if hvd.rank() == 0 else np.ones(8, np.float32)
    expect_raise_on_every_rank(comm, REFUSED + (hvd.HoroError,), lambda: hvd.allreduce(x, op=hvd.Sum), (), "unnamed")
    for i in range(5):
        inputs = make_rank_inputs(("unnamed-after", i), "float64", (i + 3,), "Sum", "exact", hvd.size())
        check_result(hvd.allreduce(inputs[hvd.rank()], op=hvd.Sum), inputs, "Sum", True, what=f"unnamed {i}")


def test_reused_name_is_refused_while_in_flight_on_every_rank(hvd, comm):
    """Each rank reuses a name whose collective cannot have completed yet (a peer has not submitted
    it): refused there with an error naming the tensor, and the collective in flight goes on."""
    size, rank = hvd.size(), hvd.rank()
    held_by_root, held_by_others = "inflight.root", "inflight.others"
    inputs = {n: make_rank_inputs(n, "float32", (9,), "Sum", "exact", size) for n in (held_by_root, held_by_others)}
    mine, theirs = (held_by_root, held_by_others) if rank == 0 else (held_by_others, held_by_root)
    first = hvd.allreduce_async(inputs[mine][rank], name=mine, op=hvd.Sum)
    exc = None
    try:
        hvd.allreduce_async(inputs[mine][rank], name=mine, op=hvd.Sum)
    except REFUSED + (hvd.HoroError,) as e:
        exc = e
    gather_and_compare(comm, exc is not None, "the reuse of a name in flight was refused")
    assert mine in str(exc) and "in flight" in str(exc), str(exc)
    assert not hvd.poll(first), "the collective completed before every rank submitted it"
    comm.Barrier()  # only now do the others submit the name this rank holds in flight
    second = hvd.allreduce_async(inputs[theirs][rank], name=theirs, op=hvd.Sum)
    check_result(hvd.synchronize(first), inputs[mine], "Sum", True, what=f"{mine}: the call in flight")
    check_result(hvd.synchronize(second), inputs[theirs], "Sum", True, what=theirs)


def test_name_is_free_once_its_collective_completed_unsynchronized(hvd, comm):
    """As in Horovod, a name is free again when its collective completes, synchronized or not."""
    size, rank = hvd.size(), hvd.rank()
    name = "reuse.after.completion"
    inputs = make_rank_inputs(name, "float32", (9,), "Sum", "exact", size)
    first = hvd.allreduce_async(inputs[rank], name=name, op=hvd.Sum)
    _wait_until_done(hvd, first)  # poll() reads done only after the name was freed
    again = hvd.allreduce_async(inputs[rank], name=name, op=hvd.Sum)
    check_result(hvd.synchronize(again), inputs, "Sum", True, what=f"{name}: reused before synchronize")
    check_result(hvd.synchronize(first), inputs, "Sum", True, what=f"{name}: the first call")
    check_result(hvd.allreduce(inputs[rank], name=name, op=hvd.Sum), inputs, "Sum", True, what=f"{name}: again")


def test_horovod_style_error_tests_in_one_job_leave_every_rank_in_step(hvd, comm):
    """The sequence Horovod's test files run in one job: a duplicate name on rank 0 while the others
    have not submitted it, then on the others (handles never synchronized), the same name in another
    collective next, mismatches raising on every rank, then more collectives; nothing may hang."""
    size, rank = hvd.size(), hvd.rank()
    tensor = np.ones((17, 17), np.float32)
    for collective, kwargs in (("allreduce_async", {}), ("broadcast_async", {"root_rank": 0}),
                               ("allgather_async", {})):
        fn = getattr(hvd, collective)
        for turn in ("root", "others"):
            if (rank == 0) == (turn == "root"):
                fn(tensor, name="hvd.duplicate_name", **kwargs)
                if turn == "root":  # the others have not submitted it: still in flight for certain
                    with pytest.raises(REFUSED + (hvd.HoroError,), match="hvd.duplicate_name"):
                        fn(tensor, name="hvd.duplicate_name", **kwargs)
            hvd.barrier()
    rows = 3 if rank == 0 else 4
    expect_raise_on_every_rank(
        comm, hvd.HoroError, lambda: hvd.allgather(np.ones((2, rows), np.float32), name="hvd.mismatch"),
        ("hvd.mismatch",), what="allgather with mismatched trailing shapes",
    )
    expect_raise_on_every_rank(
        comm, REFUSED + (hvd.HoroError,),
        lambda: hvd.allreduce(_strided() if rank == size - 1 else np.ones(8, np.float32), name="hvd.refused"),
        ("hvd.refused",), what="one rank refuses",
    )
    for i in range(10):
        inputs = make_rank_inputs(("after-hvd", i), "int64", (i + 1,), "Sum", "wide", size)
        check_result(hvd.allreduce(inputs[rank], name=f"hvd.after.{i}", op=hvd.Sum), inputs, "Sum", True,
                     what=f"after.{i}")
        got = hvd.allgather(np.full((rank + 1, 2), i, np.int32), name=f"hvd.gather.{i}")
        assert got.shape == (size * (size + 1) // 2, 2)
    gather_and_compare(comm, True, "reached the end")
